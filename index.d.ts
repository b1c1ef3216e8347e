/// <reference types="node" />
// Public API of mlx-node (see DESIGN.md). Every failure is an MlxNodeError with a stable `code`.

export type ErrorCode =
  | 'MODEL_NOT_FOUND'
  | 'UNSUPPORTED_MODEL'
  | 'INVALID_WEIGHTS'
  | 'INVALID_ARGUMENT'
  | 'DISPOSED'
  | 'ABORTED'
  /** A prompt cache used with a model it was not made for (another model's layers, heads, head size or dtype). */
  | 'CACHE_MISMATCH'
  /** A prompt-cache or chat file that is truncated, not a safetensors file, or not a cache. */
  | 'INVALID_CACHE_FILE'
  /** `PromptCache.trim()` while a prefill or generation runs on the cache: await it first. */
  | 'CACHE_BUSY'
  /** A Hugging Face Hub model that answered 401/403: set HF_TOKEN to a token that may read it. */
  | 'AUTH_REQUIRED'
  /**
   * A Hugging Face Hub download that failed: the hub cannot be reached, a connection kept
   * breaking (what arrived is kept and the next load resumes it), or a file's size or hash is
   * not what the hub reports. The cache's snapshots and refs are left as they were.
   */
  | 'DOWNLOAD_FAILED'
  /**
   * A distributed model (`loadModel`'s `distributed` option) whose processes could not start or
   * stay together: a peer not reached within the timeout, a peer lost during a generation, or
   * processes that loaded different model folders.
   */
  | 'DISTRIBUTED_ERROR'
  /**
   * A reference clip for voice cloning that cannot be used: not a WAV file (WAV is what is read),
   * truncated or with a header that claims more data than the file holds, zero channels,
   * NaN or infinite samples, silence, shorter than 1 s, or an unusable sample rate (outside
   * 4-384 kHz, or one that resamples to 16/24 kHz only through a huge filter, such as 44101 Hz).
   * Clips over 60 s are read up to 60 s.
   */
  | 'INVALID_AUDIO'
  | 'MLX_ERROR';

export class MlxNodeError extends Error {
  readonly code: ErrorCode;
}

export interface MlxInfo {
  mlxVersion: string;
  backend: 'cpu' | 'metal' | 'cuda';
  device: string;
  /** Which library serves cblas_sgemm, looked up at run time, e.g. 'openblas'. */
  blas: string;
  /** The file that library was loaded from. */
  blasPath: string;
  /** OpenBLAS's core type (the kernels it chose for this CPU, or OPENBLAS_CORETYPE's); '' without OpenBLAS. */
  openblasCore: string;
  /**
   * Each custom CPU kernel and whether it runs in this process: switched on, on the CPU
   * backend, with the CPU features it needs. See docs/kernels.md for the switches.
   */
  kernels: Record<'gemv' | 'qmm' | 'qmmInt8' | 'rows' | 'attention' | 'decodeAttention' | 'math' | 'sampling' | 'speech', boolean>;
  /**
   * Whether `precision: 'exact'` decode steps run attention as one kernel with MLX's bits:
   * `attention` and `gemv` on, and OpenBLAS's summation of that call found by calibration
   * on this CPU (docs/kernels.md#exact-decode-attention). Otherwise MLX's own ops run.
   */
  exactDecodeAttention: boolean;
  /**
   * The instruction set `precision: 'fast'`'s integer kernel takes on this CPU: 'amx' (AMX
   * tiles for 16 rows or more, AVX-512 VNNI for fewer), 'avx512-vnni', 'avx-vnni', 'avx2' or
   * 'portable'. All give the same bits; `MLX_NODE_CPU_FEATURES` caps it
   * (docs/kernels.md#cpu-features).
   */
  fastKernelPath: 'amx' | 'avx512-vnni' | 'avx-vnni' | 'avx2' | 'portable';
  /**
   * Whether fast precision's prompt chunks of 64 positions or more on 8-bit weights, or 4-bit
   * ones in groups of 32, run the exact kernel's panel with fused multiply-adds, the faster
   * choice where the integer kernel is 'avx2', 'avx-vnni' or 'portable' (true there), rather
   * than the integer kernel. The one place where fast precision's bits depend on the CPU
   * (docs/kernels.md#fast-precision).
   */
  fastPromptsFused: boolean;
}

export function mlxInfo(): MlxInfo;

export interface LoadModelOptions {
  /** Compute dtype; default: the weights' own. */
  dtype?: 'float32' | 'float16' | 'bfloat16';
  signal?: AbortSignal;
  /**
   * Called with the fraction of the weight bytes read: strictly increasing, below 1 while
   * loading, then exactly 1 once the model is ready (`detail` `{ stage: 'load' }`). While a
   * Hugging Face model downloads it is called with 0 and a `stage: 'download'` detail: the
   * file and its bytes done so far. If it throws, loadModel rejects with code 'ABORTED' (the
   * thrown value as `cause`; a download stops) and it is not called again.
   */
  onLoadProgress?: (fraction: number, detail: LoadProgressDetail) => void;
  /**
   * Concurrent generate()/stream() calls on the model are decoded together, this many at
   * most per step (default 8, 1..256); more wait for a place.
   */
  maxBatch?: number;
  /**
   * How quantized layers compute on the CPU. 'exact': MLX's arithmetic, the same tokens as
   * MLX-LM. 'fast': integer dot products on activations rounded to two 8-bit parts (about 12
   * bits for 2- and 4-bit weights, 15 for 8-bit ones; llama.cpp rounds to one); several
   * times faster, within the measured tolerance in docs/kernels.md#fast-precision (top-1
   * agreement 99.9%, mean KL about 1e-5 on a trained model). Default: 'fast' for a model
   * quantized in MLX's affine mode (MLX-community's 4- and 8-bit models, GGUF's Q4_0, Q4_1,
   * Q8_0 and K-quants) on the CPU, 'exact' otherwise (float models, the floating-point modes, Metal and
   * CUDA). No effect on float models or other backends. `LanguageModel.precision` tells
   * which applies.
   */
  precision?: 'exact' | 'fast';
  /**
   * Splits the model across processes with MLX's distributed layer, as MLX-LM's
   * `sharded_load` does (tensor parallelism: each process holds and runs 1/N of every
   * attention and MLP layer; or a pipeline of layers). Every process runs the same script, started by `mlx.launch` or
   * `npx mlx-node launch` (which set `MLX_RANK` and `MLX_HOSTFILE`), loads the same model and
   * makes the same calls in the same order; each gets the same tokens. `maxBatch` is 1.
   * With `leader: true`, rank 0 alone makes the calls (a server, say) and the other processes
   * call `follow()`.
   * See docs/distributed.md. Code DISTRIBUTED_ERROR when the processes cannot start or stay
   * together.
   */
  distributed?: DistributedOptions;
}

export interface DistributedOptions {
  /** MLX's backend: 'ring' (TCP), 'mpi', or 'any' (default: the first that starts). */
  backend?: 'ring' | 'mpi' | 'any';
  /**
   * 'tensor' (default): 1/N of every attention and MLP layer on each process, as MLX-LM's
   * `shard()`. 'pipeline': a run of whole layers on each process, as MLX-LM's `pipeline()`
   * (qwen2, qwen3_moe, ministral3, qwen3_5, qwen3_5_moe: the families MLX-LM pipelines).
   */
  strategy?: 'tensor' | 'pipeline';
  /** Milliseconds to wait for the other processes to connect (default 60000). */
  timeout?: number;
  /**
   * Rank 0 takes the calls; every other process calls `follow()` and repeats rank 0's work
   * step for step (default false: every process makes the same calls). Concurrent calls on
   * rank 0 are batched (`maxBatch`), and prompt caches work, but `prefill()` and
   * `loadPromptCache()` are INVALID_ARGUMENT on every process, and the other processes take
   * no calls but `follow()`. This is how `mlx-node launch -- serve` serves a split model.
   */
  leader?: boolean;
}

/** The second argument of onLoadProgress. */
export type LoadProgressDetail =
  | { stage: 'load' }
  /** Bytes of one file of a Hugging Face model (a resumed file starts above 0). */
  | { stage: 'download'; file: string; bytesDone: number; bytesTotal: number };

/**
 * `path` is a model folder, or a Hugging Face model id `org/name` or `org/name@revision`
 * (branch, tag or commit; used when no file or folder of that name exists). A hub model is
 * taken from huggingface_hub's cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
 * `~/.cache/huggingface/hub`), shared with MLX-LM and mlx-audio; missing files are downloaded
 * there (resumable, checked against the hub's sizes and hashes) from `HF_ENDPOINT`, with
 * `HF_TOKEN`. `HF_HUB_OFFLINE=1` reads the cache only. Codes: MODEL_NOT_FOUND,
 * AUTH_REQUIRED, DOWNLOAD_FAILED. See docs/text-generation.md#models-from-the-hugging-face-hub.
 */
export function loadModel(path: string, options?: LoadModelOptions): Promise<LanguageModel>;

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  content: string;
  [key: string]: unknown;
}

export interface GenerateOptions {
  /** Default 256. */
  maxTokens?: number;
  /** Default 0 = greedy. */
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  minTokensToKeep?: number;
  repetitionPenalty?: number;
  /** Default 20. */
  repetitionContextSize?: number;
  presencePenalty?: number;
  /** Default 20, as MLX-LM. */
  presenceContextSize?: number;
  frequencyPenalty?: number;
  /** Default 20, as MLX-LM. */
  frequencyContextSize?: number;
  logitBias?: Record<number, number>;
  xtcProbability?: number;
  xtcThreshold?: number;
  /** Same seed + same options = same tokens as MLX-LM. */
  seed?: number;
  /** Stop strings, excluded from the text. */
  stop?: string[];
  /** Prompt tokens processed per step (default 2048). */
  prefillStepSize?: number;
  /**
   * Reuse this cache's longest common token prefix with the input, trim the rest, and leave
   * the input and the reply in it. Generations on one cache run one after another.
   */
  promptCache?: PromptCache;
  /** Report each token's log-probability (MLX-LM's: after penalties and bias, before temperature and filters). */
  logprobs?: boolean;
  /** Also report this many most likely tokens per step, 0..20 (implies `logprobs`). */
  topLogprobs?: number;
  signal?: AbortSignal;
  stopOnAbortSignal?: boolean;
  onTextChunk?: (text: string) => void;
}

export interface TokenLogprob {
  token: number;
  logprob: number;
}

export interface GenerationResult {
  text: string;
  /** Generated ids, EOS not included. */
  tokens: number[];
  /** One per entry of `tokens`, when `logprobs` was asked for; `top` highest first. */
  logprobs?: (TokenLogprob & { top: TokenLogprob[] })[];
  finishReason: 'stop' | 'length' | 'abort';
  /** The whole input, cached tokens included. */
  promptTokens: number;
  /** Input tokens served from the prompt cache (0 without one). */
  cachedTokens: number;
  /** Decode steps taken, counting a final EOS as MLX-LM does. */
  generationTokens: number;
  promptTps: number;
  generationTps: number;
  /** Bytes. */
  peakMemory: number;
}

export interface GenerationChunk {
  text: string;
  token: number;
  /** With `logprobs`: the token's log-probability (absent on a final flush chunk). */
  logprob?: number;
  topLogprobs?: TokenLogprob[];
}

export interface PromptCacheOptions {
  /**
   * A rotating cache of this many positions (MLX-LM's RotatingKVCache, 4 kept at the start).
   * Ignored by models that make their own caches (sliding-window, convolution or recurrent
   * layers), as in MLX-LM.
   */
  maxKvSize?: number;
  /**
   * Quantize keys and values to 2, 3, 4, 5, 6 or 8 bits (MLX-LM's QuantizedKVCache).
   * INVALID_ARGUMENT on a model with sliding-window layers (MLX-LM cannot quantize their caches).
   */
  kvBits?: number;
  /** 32, 64 (default) or 128; must divide the model's head size. */
  kvGroupSize?: number;
  /** Positions held before quantizing starts (default 5000, as MLX-LM). */
  quantizedKvStart?: number;
}

/** The KV state of one token sequence for one model, kept between generations. */
export class PromptCache {
  private constructor();
  /** The ids it holds (empty for a file saved without them: a prefix the next input continues). */
  readonly tokens: number[];
  /** Positions held. */
  readonly length: number;
  /** Bytes of memory it holds. */
  readonly nbytes: number;
  readonly disposed: boolean;
  /** The metadata of the file it was loaded from ({} otherwise). */
  readonly metadata: Record<string, string>;
  /** Runs `input` into the cache without generating (as MLX-LM's cache_prompt). */
  prefill(input: GenerationInput, options?: { signal?: AbortSignal; prefillStepSize?: number }): Promise<void>;
  /** Drops the last `n` positions; returns how many were dropped (0 for a rotating cache that has wrapped). */
  trim(n: number): number;
  /** Writes MLX-LM's prompt-cache file (mlx_lm's load_prompt_cache reads it), with the ids in metadata "tokens". */
  save(path: string, metadata?: Record<string, string>): Promise<void>;
  dispose(): void;
  [Symbol.dispose](): void;
}

export type ChatOptions = {
  system?: string;
  messages?: ChatMessage[];
  templateOptions?: Omit<ChatTemplateOptions, 'addGenerationPrompt'>;
} & Omit<GenerateOptions, 'promptCache'>;

/** A conversation that keeps its KV cache between turns; turns run one after another. */
export class Chat {
  private constructor();
  readonly messages: ChatMessage[];
  readonly promptCache: PromptCache;
  readonly disposed: boolean;
  /**
   * Appends the message (a string is a user message) and, once generated, the reply. The turn
   * keeps the ids the cache holds where the rendered conversation still starts with what they
   * stand for (the last input, the reply as `result.text`, its EOS): the model continues from its
   * own reply ids. It encodes the rest; its ids are the first `result.promptTokens` of
   * `promptCache.tokens`.
   */
  send(message: string | ChatMessage, options?: Omit<GenerateOptions, 'promptCache'>): Promise<GenerationResult>;
  /** As send(), streamed. An aborted turn leaves the messages (and the cache's prefix) as they were. */
  stream(
    message: string | ChatMessage,
    options?: Omit<GenerateOptions, 'promptCache'>
  ): AsyncIterable<GenerationChunk> & { result: Promise<GenerationResult> };
  /** Back to `messages` (default: those it was created with); the cache is reused by prefix. */
  reset(messages?: ChatMessage[]): void;
  /** Messages, options and cache in one file (an MLX-LM prompt-cache file). */
  save(path: string): Promise<void>;
  dispose(): void;
  [Symbol.dispose](): void;
}

export interface ModelInfo {
  modelType: string;
  /** The most positions the model was made for (config `max_position_embeddings`). */
  contextLength: number;
  numLayers: number;
  vocabSize: number;
  dtype: string;
  /**
   * The bulk of the weights' quantization (config.json's top-level `quantization`; single layers
   * may differ, such as GPT-OSS's 8-bit routers): MLX's packing `mode` ('affine', or a
   * floating-point mode: 'mxfp4', 'nvfp4', 'mxfp8'). null for a float model.
   */
  quantization: null | { bits: number; groupSize: number; mode: 'affine' | 'mxfp4' | 'nvfp4' | 'mxfp8' };
  /** This process's place when the model is split across processes; null otherwise. */
  distributed: null | { rank: number; size: number; backend: string; strategy: string; leader: boolean };
}

export interface ChatTemplateOptions {
  addGenerationPrompt?: boolean;
  enableThinking?: boolean;
  tools?: object[];
  /**
   * Further template variables, as transformers' `apply_chat_template(**kwargs)` passes them
   * (e.g. `{ reasoning_effort: 'high' }` for GPT-OSS's harmony template). They override the
   * special tokens of the same name; `messages`, `tools`, `documents`, `add_generation_prompt`
   * and `enable_thinking` have options of their own (INVALID_ARGUMENT here).
   */
  variables?: Record<string, unknown>;
}

export type GenerationInput = string | ChatMessage[] | number[];

export class LanguageModel {
  private constructor();
  readonly info: ModelInfo;
  /**
   * The precision the model runs in: loadModel's `precision` option, or its default ('fast'
   * for an affine-quantized model on the CPU, 'exact' otherwise).
   */
  readonly precision: 'exact' | 'fast';
  readonly disposed: boolean;
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[];
  decode(tokens: number[]): string;
  applyChatTemplate(messages: ChatMessage[], options?: ChatTemplateOptions): string;
  /** string: raw text (BOS as MLX-LM); ChatMessage[]: chat template with generation prompt; number[]: token ids. */
  generate(input: GenerationInput, options?: GenerateOptions): Promise<GenerationResult>;
  /**
   * On a process other than rank 0 of a model split with `distributed.leader`: runs rank 0's
   * generations along with it, and resolves once rank 0 disposes its model (rejects with
   * DISTRIBUTED_ERROR if a process is lost). INVALID_ARGUMENT on any other model.
   */
  follow(): Promise<void>;
  stream(
    input: GenerationInput,
    options?: GenerateOptions
  ): AsyncIterable<GenerationChunk> & { result: Promise<GenerationResult> };
  createPromptCache(options?: PromptCacheOptions): PromptCache;
  /** Reads an MLX-LM prompt-cache file (KVCache, RotatingKVCache, QuantizedKVCache layers). */
  loadPromptCache(path: string): Promise<PromptCache>;
  createChat(options?: ChatOptions): Chat;
  loadChat(path: string): Promise<Chat>;
  dispose(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface LoadTTSOptions {
  signal?: AbortSignal;
  /**
   * Keep the streamed voice's S3Gen prompt states so that stream() chunks skip the
   * voice prompt (default true; made by the first stream() of a voice, about 4.6 MB
   * per prompt frame: 2.3 GB for a 10 s voice at full size). false: every chunk
   * runs S3Gen over the whole prompt, with no extra memory.
   */
  promptCache?: boolean;
  /**
   * While a Hugging Face model downloads: (0, `{ stage: 'download', file, bytesDone,
   * bytesTotal }`); then (1, `{ stage: 'load' }`) once the model is ready. If it throws,
   * loadTTS rejects with code 'ABORTED' (the thrown value as `cause`).
   */
  onLoadProgress?: (fraction: number, detail: LoadProgressDetail) => void;
  /**
   * The S3 speech tokenizer that voice cloning needs (`createVoice`, `voice: 'clip.wav'`): a
   * folder holding its `model.safetensors`, or that file. Default: `mlx-community/S3TokenizerV2`
   * in the Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`), as mlx-audio finds it. Only
   * read at the first clone; a missing file fails that clone with MODEL_NOT_FOUND.
   */
  s3Tokenizer?: string;
}

/**
 * `path` is a Chatterbox folder, or a Hugging Face model id `org/name[@revision]`, resolved
 * as loadModel does (its `*.json`, `*.safetensors`, `*.txt` and `*.model` files).
 */
export function loadTTS(path: string, options?: LoadTTSOptions): Promise<TextToSpeech>;

export interface SynthesizeOptions {
  /** Sampling temperature of the speech tokens (default 0.8; 0 = greedy). */
  temperature?: number;
  /** Classifier-free guidance weight (default 0.5; 0 turns guidance off). */
  cfgWeight?: number;
  /** Emotion exaggeration (default 0.5). */
  exaggeration?: number;
  /** Default 1.2. */
  repetitionPenalty?: number;
  /** Default 0.05. */
  minP?: number;
  /** Default 1 (off). */
  topP?: number;
  /** Most speech tokens per piece of text (25 per second of audio; default 1000). */
  maxTokens?: number;
  seed?: number;
  /**
   * Another voice: a `Voice` from `createVoice()`, a WAV clip to clone (cloned once, again only
   * if the file changes), or another voice's conds.safetensors.
   */
  voice?: string | Voice;
  /**
   * Language of the text, an ISO 639-1 code (default 'en'; case-insensitive). A multilingual
   * Chatterbox speaks ar, da, de, el, en, es, fi, fr, he, hi, it, ja, ko, ms, nl, no, pl, pt,
   * ru, sv, sw, tr, zh; any other code is INVALID_ARGUMENT listing them. The English model
   * speaks English only: another code is INVALID_ARGUMENT.
   */
  language?: string;
  signal?: AbortSignal;
}

/** A voice cloned from a reference clip by `TextToSpeech.createVoice()`. */
export class Voice {
  private constructor();
  /** Seconds of reference audio it was made from (at most the first 60 s are read). */
  readonly duration: number;
  /** The clip was longer than 60 s and was cut there. */
  readonly truncated: boolean;
  readonly disposed: boolean;
  /** Writes its conditioning as a conds.safetensors, as mlx-audio reads it (and `voice: path`). */
  save(path: string): Promise<void>;
  /** Frees it; later use is DISPOSED. A collected Voice is freed too. */
  dispose(): void;
  [Symbol.dispose](): void;
}

export interface CreateVoiceOptions {
  /** The voice's stored emotion exaggeration (default 0.5; a call's `exaggeration` still applies;
   *  Turbo has no emotion input and ignores it). */
  exaggeration?: number;
  signal?: AbortSignal;
}

export interface StreamOptions extends SynthesizeOptions {
  /**
   * Speech tokens before the first chunk of audio (default 10; 25 tokens = 1 s of audio;
   * at least 5). Fewer: earlier first audio, more chunks to vocode.
   */
  firstChunkTokens?: number;
  /**
   * The most speech tokens of a later chunk (default 50; at least 1): each chunk has twice
   * the tokens of the one before, up to this (10, 20, 40, 50, 50, ... by default).
   */
  chunkTokens?: number;
}

export class Audio {
  private constructor();
  readonly audio: Float32Array;
  readonly sampleRate: number;
  readonly speechTokens: number[];
  /** Seconds. */
  readonly duration: number;
  /** T3's prompt positions (voice conditioning, text tokens, start of speech), all sentences. */
  readonly promptTokens: number;
  /** T3's prompt positions per second, its first speech token included. */
  readonly promptTps: number;
  /** Speech tokens T3 sampled (its stop token included), all sentences. */
  readonly generationTokens: number;
  readonly generationTps: number;
  /** Seconds of native work: T3, S3Gen and the vocoder. */
  readonly processingTime: number;
  /** processingTime / duration, as mlx-audio reports it: below 1 is faster than real time. */
  readonly realTimeFactor: number;
  /** Bytes of MLX memory at the peak of the call. */
  readonly peakMemory: number;
  toWav(options?: { format?: 'pcm16' | 'float32' }): Buffer;
  save(path: string, options?: { format?: 'pcm16' | 'float32' }): Promise<void>;
}

/** What `stream()` produced and cost, once it has ended: the figures of `Audio`. */
export interface SpeechResult {
  speechTokens: number[];
  /** Seconds of audio. */
  duration: number;
  promptTokens: number;
  promptTps: number;
  generationTokens: number;
  /** While streaming, T3's decode seconds include the chunks vocoded between its tokens. */
  generationTps: number;
  processingTime: number;
  realTimeFactor: number;
  peakMemory: number;
  /** The voice's S3Gen prompt cache: made by this stream, kept from an earlier one (or
   *  `prepare()`), or none (`promptCache: false`, or a voice whose prompt cannot be cached). */
  promptCache: 'made' | 'kept' | 'none';
  /** The iteration was left early (for a text stream: the finished sentences only). */
  aborted: boolean;
}

export interface AudioChunk {
  audio: Float32Array;
  sampleRate: number;
  index: number;
}

export class TextToSpeech {
  private constructor();
  readonly disposed: boolean;
  readonly sampleRate: number;
  synthesize(text: string, options?: SynthesizeOptions): Promise<Audio>;
  /** synthesize() accepts StreamOptions too and ignores the chunk sizes. */
  stream(text: string | AsyncIterable<string>, options?: StreamOptions): AsyncIterable<AudioChunk> & { result: Promise<SpeechResult> };
  /** Makes the voice's prompt cache now, which its first stream() would otherwise make
   *  before its first chunk (about a synthesize() of a short sentence). */
  prepare(options?: { voice?: string | Voice; signal?: AbortSignal }): Promise<'made' | 'kept' | 'none'>;
  /**
   * Clones a voice from a reference clip, as mlx-audio's `prepare_conditionals`: a WAV file
   * (8/16/24/32-bit PCM or float, any rate, mono or stereo) or mono samples at a rate. S3Gen is
   * conditioned on the first 10 s, T3's prompt on the first 6 s; 5-10 s of clean speech is best.
   * Chatterbox Turbo clones as its own `prepare_conditionals`: a clip longer than 5 s
   * (else INVALID_AUDIO), loudness normalised to -27 LUFS, T3's prompt from the first 15 s.
   * Nothing is written to disk unless `Voice.save()` is called.
   */
  createVoice(audio: string | { samples: Float32Array; sampleRate: number }, options?: CreateVoiceOptions): Promise<Voice>;
  dispose(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}
