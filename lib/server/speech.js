'use strict';
// POST /v1/audio/speech: OpenAI's speech endpoint over TextToSpeech. A voice of the
// server's voices folder (lib/server/voices.js) answers to its name, or to mlx-audio's
// ref_audio naming its file; the model's own voice answers to every OpenAI voice name
// (a folder voice of the same name wins). `stream: true` sends 16-bit PCM chunks as they
// are made. GET /v1/audio/voices lists the folder's voices as mlx-audio's server does.
const { encodeWav, pcm16 } = require('../audio');
const { HttpError, badRequest } = require('./http');

const OPENAI_VOICES = new Set(['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse', 'marin', 'cedar', 'default']);

async function speech(ctx, body, req, res) {
  if (!ctx.tts) throw new HttpError(404, 'this server has no speech model (start it with --tts DIR)', { code: 'model_not_found' });
  if (typeof body.input !== 'string' || body.input.trim().length === 0) throw badRequest("'input' must be a non-empty string", 'input');
  const name = voiceName(ctx, body);
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
    if (name !== null) options.voice = await ctx.voices.voiceOf(name);
    if (body.stream) {
      // Headers once the first chunk is made: what fails before it (a voice, an option) is
      // still an error reply rather than a cut stream.
      const chunks = ctx.tts.stream(body.input, options)[Symbol.asyncIterator]();
      let next = await chunks.next();
      res.writeHead(200, { 'content-type': 'audio/pcm', 'x-sample-rate': String(ctx.tts.sampleRate) });
      for (; !next.done; next = await chunks.next()) res.write(pcm16(next.value.audio));
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

// The folder voice a request names (by `voice`, or by mlx-audio's `ref_audio`), or null
// for the model's own voice; a 400 listing the voices for any other name.
function voiceName(ctx, body) {
  const { voice, ref_audio: ref } = body;
  const given = (x) => x !== undefined && x !== null;
  if (given(ref)) {
    if (!ctx.voices) throw badRequest("'ref_audio' needs a voices folder on the server (--voices DIR); this one has none", 'ref_audio');
    const name = ctx.voices.nameOf(ref);
    if (given(voice) && voice !== name && !OPENAI_VOICES.has(voice)) throw badRequest("give 'voice' or 'ref_audio', not two different voices", 'voice');
    return name;
  }
  if (!given(voice)) return null;
  const names = ctx.voices ? ctx.voices.names() : [];
  if (typeof voice === 'string' && names.includes(voice)) return voice;
  if (OPENAI_VOICES.has(voice)) return null;
  const folder = names.length > 0 ? `this server's voices: ${names.join(', ')}; ` : '';
  throw badRequest(`voice ${JSON.stringify(voice)} is not available; ${folder}the model's own voice answers to ${[...OPENAI_VOICES].join(', ')}`, 'voice');
}

// GET /v1/audio/voices, shaped as mlx-audio's server answers it.
function voices(ctx, url) {
  if (!ctx.tts) throw new HttpError(404, 'this server has no speech model (start it with --tts DIR)', { code: 'model_not_found' });
  const names = ctx.voices ? ctx.voices.names() : [];
  return { object: 'list', model: url.searchParams.get('model') ?? ctx.ttsId, data: names.map((n) => ({ id: n, name: n })) };
}

module.exports = { speech, voices };
