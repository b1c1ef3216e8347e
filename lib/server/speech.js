'use strict';
// POST /v1/audio/speech: OpenAI's speech endpoint over TextToSpeech. The model's own
// voice answers to every OpenAI voice name; `stream: true` sends 16-bit PCM chunks as
// they are made.
const { encodeWav, pcm16 } = require('../audio');
const { HttpError, badRequest } = require('./http');

const OPENAI_VOICES = new Set(['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse', 'marin', 'cedar', 'default']);

async function speech(ctx, body, req, res) {
  if (!ctx.tts) throw new HttpError(404, 'this server has no speech model (start it with --tts DIR)', { code: 'model_not_found' });
  if (typeof body.input !== 'string' || body.input.trim().length === 0) throw badRequest("'input' must be a non-empty string", 'input');
  if (body.voice !== undefined && !OPENAI_VOICES.has(body.voice)) {
    throw badRequest(`voice ${JSON.stringify(body.voice)} is not available; this server speaks with its model's voice (any of ${[...OPENAI_VOICES].join(', ')})`, 'voice');
  }
  const format = body.response_format ?? 'wav';
  if (format !== 'wav' && format !== 'pcm') throw badRequest("'response_format' must be 'wav' or 'pcm'", 'response_format');
  if (body.stream !== undefined && typeof body.stream !== 'boolean') throw badRequest("'stream' must be a boolean", 'stream');
  if (body.speed !== undefined && body.speed !== 1) throw badRequest("only 'speed': 1 is supported", 'speed');
  const abort = new AbortController();
  const gone = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', gone);
  ctx.running.add(abort);
  // mlx-audio's extras beyond OpenAI's fields (checked by TextToSpeech itself).
  const options = { signal: abort.signal };
  for (const [k, o] of [['seed', 'seed'], ['temperature', 'temperature'], ['max_tokens', 'maxTokens'], ['cfg_weight', 'cfgWeight'], ['exaggeration', 'exaggeration'], ['language', 'language']]) {
    if (body[k] !== undefined && body[k] !== null) options[o] = body[k];
  }
  // mlx-audio's server names it lang_code.
  if (options.language === undefined && body.lang_code !== undefined && body.lang_code !== null) options.language = body.lang_code;
  try {
    if (body.stream) {
      res.writeHead(200, { 'content-type': 'audio/pcm', 'x-sample-rate': String(ctx.tts.sampleRate) });
      const s = ctx.tts.stream(body.input, options);
      for await (const chunk of s) res.write(pcm16(chunk.audio));
      res.end();
      return;
    }
    const audio = await ctx.tts.synthesize(body.input, options);
    const data = format === 'wav' ? encodeWav(audio.audio, audio.sampleRate) : pcm16(audio.audio);
    res.writeHead(200, { 'content-type': format === 'wav' ? 'audio/wav' : 'audio/pcm', 'content-length': data.length });
    res.end(data);
  } catch (e) {
    if (abort.signal.aborted) {
      res.destroy();
      return;
    }
    if (res.headersSent) {
      res.destroy(e);
      return;
    }
    throw e;
  } finally {
    ctx.running.delete(abort);
    res.off('close', gone);
  }
}

module.exports = { speech };
