'use strict';
// `mlx-node generate DIR [PROMPT]`: one completion streamed to stdout, its figures on stderr.
const { UsageError, parse, positionals, helpText } = require('./args');
const { GENERATION_FLAGS, TEMPLATE_FLAGS, LOAD_FLAGS, generationOptions, templateOptions, loadOptions } = require('./sampling');
const { loadLanguageModel, note } = require('./progress');
const { generationFigures } = require('./figures');
const { textArgument, onStdoutClosed } = require('./io');

const FLAGS = {
  ...GENERATION_FLAGS,
  chat: { type: 'boolean', help: 'the prompt as a user message in the chat template (default: when there is one)' },
  raw: { type: 'boolean', help: 'the prompt as raw text, without the chat template' },
  ...TEMPLATE_FLAGS,
  ...LOAD_FLAGS,
  quiet: { type: 'boolean', short: 'q', help: 'nothing on stderr but errors: no progress, no figures' },
};

const HELP = helpText({
  usage: 'mlx-node generate DIR [PROMPT] [options]',
  description: [
    'Generates text with the model in folder DIR and streams it to stdout. PROMPT is read',
    'from stdin when it is "-" or left out. As mlx_lm.generate, the prompt goes through the',
    "model's chat template when it has one (--raw: never). The figures (tokens, tokens per",
    'second, peak memory) go to stderr, so stdout holds only the generated text.',
    '',
    'Examples:',
    '  mlx-node generate ./Qwen3-0.6B-4bit "Why is the sky blue?" --max-tokens 200',
    '  mlx-node generate mlx-community/Qwen3-0.6B-4bit "Hello!"   # from the Hugging Face Hub',
    '  echo "Once upon a time" | mlx-node generate ./qwen3 --raw --temp 0.7 --seed 1 > story.txt',
  ],
  flags: FLAGS,
});

const usesTemplateFlags = (values) => values.system !== undefined || values['no-think'] || values['enable-thinking'];

// The input for model.stream(): raw text, or the chat template's rendering as token ids
// (what generate() does with messages, plus the template options).
function buildInput(model, prompt, values, quiet) {
  if (values.raw) return prompt;
  const messages = [];
  if (values.system !== undefined) messages.push({ role: 'system', content: values.system });
  messages.push({ role: 'user', content: prompt });
  let text;
  try {
    text = model.applyChatTemplate(messages, { addGenerationPrompt: true, ...templateOptions(values) });
  } catch (e) {
    // As mlx_lm.generate: without a chat template the prompt is used as it is, unless
    // the template was asked for.
    const noTemplate = e.code === 'UNSUPPORTED_MODEL' && /has no chat_template/.test(e.message);
    if (!noTemplate || values.chat || usesTemplateFlags(values)) throw e;
    note(quiet, 'The model has no chat template: the prompt is used as raw text.');
    return prompt;
  }
  return model.encode(text, { addSpecialTokens: false });
}

async function run(argv) {
  const { values, positionals: pos } = parse(argv, FLAGS);
  if (values.help) return process.stdout.write(HELP);
  const [dir, promptArg] = positionals(pos, ['DIR', 'PROMPT?']);
  if (values.chat && values.raw) throw new UsageError('--chat and --raw contradict each other');
  if (values.raw && usesTemplateFlags(values)) throw new UsageError('--system, --no-think and --enable-thinking need the chat template: drop --raw');
  templateOptions(values);
  const options = generationOptions(values);
  const load = loadOptions(values);
  const quiet = Boolean(values.quiet);
  const prompt = await textArgument(promptArg, 'PROMPT');

  const model = await loadLanguageModel(dir, { ...load, quiet });
  try {
    const input = buildInput(model, prompt, values, quiet);
    // Ctrl-C ends the generation early (its figures still printed); a second one exits at once.
    const controller = new AbortController();
    let interrupted = false;
    const onInterrupt = () => {
      if (interrupted) process.exit(130);
      interrupted = true;
      controller.abort();
    };
    process.on('SIGINT', onInterrupt);
    let closed = false;
    onStdoutClosed(() => {
      closed = true;
      controller.abort();
    });
    try {
      const stream = model.stream(input, { ...options, signal: controller.signal, stopOnAbortSignal: true });
      for await (const chunk of stream) if (!closed && chunk.text) process.stdout.write(chunk.text);
      const r = await stream.result;
      if (process.stdout.isTTY) process.stdout.write('\n');
      if (!quiet) process.stderr.write(`${generationFigures(r).join('\n')}\n`);
      if (interrupted) process.exitCode = 130;
    } finally {
      process.off('SIGINT', onInterrupt);
    }
  } finally {
    await model.dispose();
  }
}

module.exports = { name: 'generate', summary: 'generate text from a prompt, streamed to stdout', synopsis: 'generate DIR [PROMPT]', run, HELP };
