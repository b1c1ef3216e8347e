/// <reference types="node" />
// mlx-node/server: an OpenAI-compatible HTTP server over loaded models (docs/server.md).
import type { Server } from 'node:http';
import type { LanguageModel, TextToSpeech } from './index';

export interface CreateServerOptions {
  model: LanguageModel;
  /** The id `/v1/models` lists and requests may name (also accepted: 'default_model'). */
  modelId?: string;
  /** Serves POST /v1/audio/speech and GET /v1/audio/voices when given. */
  tts?: TextToSpeech;
  /** The speech model's id in GET /v1/audio/voices (default 'tts'). */
  ttsId?: string;
  /**
   * A folder whose NAME.wav clips (cloned at first use) and NAME.safetensors saved voices
   * are voice NAME of the speech endpoint (needs tts; a missing folder throws).
   */
  voices?: string;
  /** Requests to /v1/* must send `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Larger request bodies get a 413 (default 4 MiB). */
  maxBodyBytes?: number;
  /** Bytes of idle conversation caches kept for reuse (default 1 GiB). */
  cacheBytes?: number;
  /** Idle conversation caches kept for reuse (default 16). */
  cacheEntries?: number;
  log?: (line: string) => void;
}

export interface MlxNodeServer extends Server {
  /** Stops accepting, aborts running requests (each ends at its next token), frees the idle caches. */
  shutdown(timeoutMs?: number): Promise<void>;
  stats(): { running: number; cachedConversations: number; cacheBytes: number; longestCache: number };
}

/** A plain Node http.Server (not listening yet). */
export function createServer(options: CreateServerOptions): MlxNodeServer;

export interface ServeOptions {
  modelPath: string;
  ttsPath?: string;
  /** createServer's voices (needs ttsPath). */
  voicesPath?: string;
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  apiKey?: string;
  /** Requests decoded together (loadModel's maxBatch; default 8). */
  maxBatch?: number;
  /** loadModel's precision for quantized models: 'exact' (default) or 'fast'. */
  precision?: 'exact' | 'fast';
  modelId?: string;
  log?: (line: string) => void;
  onLoadProgress?: (fraction: number) => void;
}

/** Loads the models and listens; `close()` shuts down and frees them. */
export function serve(options: ServeOptions): Promise<{ server: MlxNodeServer; url: string; close(): Promise<void>; model: LanguageModel; tts?: TextToSpeech }>;
