// Chat templates the conformance runners give local models: a synthesized model's own
// template ignores tools, so runs that send tools use this one.

// Qwen2.5-style tools (calls in <tool_call>): what tools.test.mjs runs against.
export const kHermesTemplate =
  "{%- if tools %}<|im_start|>system\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}\n" +
  "{%- endfor %}\n</tools>\nCall functions within <tool_call></tool_call> XML tags.<|im_end|>\n" +
  "{% endif %}{%- for message in messages %}" +
  "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant" +
  "{%- for tc in message.tool_calls %}\n<tool_call>\n{\"name\": \"{{ tc.function.name }}\", " +
  "\"arguments\": {{ tc.function.arguments }}}\n</tool_call>{%- endfor %}<|im_end|>\n" +
  "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n" +
  "</tool_response><|im_end|>\n" +
  "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}" +
  "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
