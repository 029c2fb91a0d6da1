// Reference renderings from @huggingface/jinja (npm 0.5.11), the chat-template renderer of
// transformers.js. Usage: node jinja_ref.js INPUT.json OUTPUT.json
// INPUT: [{"template": "...", "context": {...}}]; OUTPUT: [{"text": "..."} or {"error": "..."}].
'use strict';
const fs = require('fs');
const { Template } = require('@huggingface/jinja');

const [input, output] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(input, 'utf8'));
const out = cases.map(({ template, context }) => {
  try {
    return { text: new Template(template).render(context) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
});
fs.writeFileSync(output, JSON.stringify(out));
