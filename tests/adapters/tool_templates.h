// Chat templates of each tool-call family, cut down to what decides the format (how tools are
// shown, how calls and results come back), for tests of the local engine's tool calls.
#pragma once

namespace ferry::test {

// Qwen2.5 / Hermes style: tools in <tools>, calls in <tool_call>, results in <tool_response>.
inline constexpr const char* kHermesTemplate =
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n{%- for tool in tools %}\n"
    "{{ tool | tojson }}\n{%- endfor %}\n</tools>\nFor each function call, return a json object "
    "with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>\n"
    "{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- if message.content %}{{ message.content }}{% endif %}"
    "{%- for tc in message.tool_calls %}\n<tool_call>\n{\"name\": \"{{ tc.function.name }}\", "
    "\"arguments\": {{ tc.function.arguments }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// Llama 3.1 style: "Environment: ipython", JSON calls {"name", "parameters"} as the whole
// message, results in the ipython role.
inline constexpr const char* kLlama3Template =
    "{%- if tools %}<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
    "Respond with a JSON function call {\"name\": name, \"parameters\": arguments}.\n"
    "{%- for t in tools %}{{ t | tojson }}{% endfor %}<|eot_id|>{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{%- for tc in message.tool_calls %}{\"name\": \"{{ tc.function.name }}\", \"parameters\": "
    "{{ tc.function.arguments }}}{%- endfor %}<|eot_id|>"
    "{%- elif message.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n"
    "{{ message.content }}<|eot_id|>"
    "{%- else %}<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n"
    "{{ message.content }}<|eot_id|>{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

// Mistral style: [AVAILABLE_TOOLS] before the first instruction, calls as a JSON list after
// [TOOL_CALLS], results in [TOOL_RESULTS].
inline constexpr const char* kMistralTemplate =
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{%- if loop.first and tools %}[AVAILABLE_TOOLS]"
    "{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ message.content }}[/INST]"
    "{%- elif message.role == 'assistant' and message.tool_calls %}[TOOL_CALLS]["
    "{%- for tc in message.tool_calls %}{% if not loop.first %}, {% endif %}{\"name\": \""
    "{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments }}}{%- endfor %}]</s>"
    "{%- elif message.role == 'tool' %}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]"
    "{%- else %}{{ message.content }}</s>{%- endif %}{%- endfor %}";

// Mistral's newer variant: [TOOL_CALLS]name[ARGS]{...} (not supported: refused).
inline constexpr const char* kMistralArgsTemplate =
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{%- if loop.first and tools %}[AVAILABLE_TOOLS]"
    "{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ message.content }}[/INST]"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{%- for tc in message.tool_calls %}[TOOL_CALLS]{{ tc.function.name }}[ARGS]"
    "{{ tc.function.arguments }}{%- endfor %}</s>"
    "{%- elif message.role == 'tool' %}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]"
    "{%- else %}{{ message.content }}</s>{%- endif %}{%- endfor %}";

// Qwen3 style: Hermes calls, and a thinking model: enable_thinking false closes an empty
// think block in the generation prompt; otherwise the model opens <think> itself.
inline constexpr const char* kQwen3ThinkingTemplate =
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n{%- for tool in tools %}\n"
    "{{ tool | tojson }}\n{%- endfor %}\n</tools>\nFor each function call, return a json object "
    "with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>\n"
    "{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- for tc in message.tool_calls %}\n<tool_call>\n{\"name\": \"{{ tc.function.name }}\", "
    "\"arguments\": {{ tc.function.arguments }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";

// Shows the tools but names no call format: the generic (Hermes-marker) format applies.
inline constexpr const char* kGenericToolsTemplate =
    "{%- if tools %}<|im_start|>system\nFunctions: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// ChatML that ignores tools (what `ferry model synth` writes).
inline constexpr const char* kNoToolsTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace ferry::test
