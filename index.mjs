// ES module entry: the same API as index.js.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const api = require('./index.js');

export const { mlxInfo, loadModel, loadTTS, LanguageModel, PromptCache, Chat, TextToSpeech, Voice, Audio, MlxNodeError } = api;
export default api;
