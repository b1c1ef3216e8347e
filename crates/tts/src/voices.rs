//! The voices a Chatterbox speaks with: the model folder's `conds.safetensors`, another such file,
//! a WAV clip cloned when it is named, and voices cloned in memory (`createVoice`), kept by id
//! until dropped. Every kind ends as the same `Voice` (the conditioning T3 and S3Gen read).
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use mlx::Array;

use crate::s3gen::GenConds;
use crate::t3::T3Cond;
use crate::voice::clone::{ClipSource, VoiceCloner};
use crate::voice::{read_wav, Clip, Flavor};
use crate::{Result, TtsError};

/// A voice: the conditioning T3 and S3Gen read (a `conds.safetensors`).
pub struct Voice {
    pub t3: T3Cond,
    pub gen: GenConds,
}

impl Voice {
    /// `MODEL_NOT_FOUND` unless `path` is a file (what it holds is checked by `load`).
    pub fn check_path(path: &Path) -> Result<()> {
        if path.is_file() {
            return Ok(());
        }
        let what = if path.exists() { "is not a file" } else { "does not exist" };
        Err(TtsError::ModelNotFound(format!("voice file {} {what}", path.display())))
    }

    pub fn load(path: &Path) -> Result<Voice> {
        Self::check_path(path)?;
        // One read of the file: S3Gen takes its `gen.*` tensors, T3 the `t3.*` ones.
        let (tensors, _) = mlx::io::load_safetensors(path).map_err(|e| TtsError::InvalidWeights(format!("{}: {}", path.display(), e.message)))?;
        Voice::from_tensors(tensors, path)
    }

    /// From the tensors of a `conds.safetensors` (read, or made by cloning); `source` names
    /// them in errors.
    pub fn from_tensors(mut tensors: HashMap<String, Array>, source: &Path) -> Result<Voice> {
        let gen = GenConds::from_tensors(&mut tensors, &source.display().to_string())?;
        Ok(Voice { t3: T3Cond::from_tensors(tensors, source)?, gen })
    }
}

/// Which voice a call asks for (none: the model folder's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoiceRef {
    /// A `conds.safetensors`, or a WAV clip cloned when first used.
    File(PathBuf),
    /// A voice made by `Voices::create`.
    Cloned(u32),
}

/// What identifies a voice's prompt cache: a file while it is unchanged on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoiceKey {
    Builtin,
    File(PathBuf, Option<SystemTime>, u64),
    Cloned(u32),
}

impl VoiceKey {
    pub fn of(voice: Option<&VoiceRef>) -> VoiceKey {
        match voice {
            None => VoiceKey::Builtin,
            Some(VoiceRef::Cloned(id)) => VoiceKey::Cloned(*id),
            Some(VoiceRef::File(path)) => {
                let meta = std::fs::metadata(path).ok();
                VoiceKey::File(path.clone(), meta.as_ref().and_then(|m| m.modified().ok()), meta.map_or(0, |m| m.len()))
            }
        }
    }
}

/// A voice made from a clip, with the tensors `save` writes.
struct Cloned {
    voice: Arc<Voice>,
    tensors: Vec<(String, Array)>,
}

/// Where cloning's networks come from (loaded at the first clone, kept after).
pub struct CloneSource {
    pub dir: PathBuf,
    /// The S3 tokenizer's `model.safetensors`, found by the caller (the bindings look in the
    /// Hugging Face cache, as mlx-audio does at load), or why it was not: the first clone fails
    /// with that (MODEL_NOT_FOUND), and a model without it still speaks its other voices.
    pub tokenizer: std::result::Result<PathBuf, String>,
    pub prompt_len: usize,
    /// Chatterbox Turbo, which clones as its own `prepare_conditionals` does (`Flavor::Turbo`).
    pub turbo: bool,
}

pub struct Voices {
    builtin: Option<Arc<Voice>>,
    /// The last voice file read, while it is unchanged on disk: a voice keeps its T3
    /// conditioning once computed (`T3Cond`), and a WAV is cloned once.
    file: Mutex<Option<(VoiceKey, Arc<Voice>)>>,
    cloned: Mutex<HashMap<u32, Cloned>>,
    next_id: AtomicU32,
    source: CloneSource,
    cloner: Mutex<Option<Arc<VoiceCloner>>>,
}

/// Extensions of audio formats that are not read: named in the error, which says WAV is.
const OTHER_AUDIO: &[&str] = &["mp3", "flac", "ogg", "opus", "m4a", "aac", "aiff", "aif", "webm", "wma"];

/// Whether `path` holds a WAV clip rather than a `conds.safetensors`: its extension, or
/// (whatever its name) a RIFF header. Audio in other formats is INVALID_AUDIO.
fn is_clip(path: &Path) -> Result<bool> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default();
    if OTHER_AUDIO.contains(&ext.as_str()) {
        return Err(TtsError::InvalidAudio(format!("{}: .{ext} files are not read; give the voice as a WAV file", path.display())));
    }
    if ext == "wav" || ext == "wave" {
        return Ok(true);
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    Ok(n == 4 && (&head == b"RIFF" || &head == b"RIFX" || &head == b"RF64"))
}

impl Voices {
    pub fn new(dir: &Path, source: CloneSource) -> Result<Voices> {
        let conds = dir.join("conds.safetensors");
        let builtin = if conds.exists() { Some(Arc::new(Voice::load(&conds)?)) } else { None };
        Ok(Voices {
            builtin,
            file: Mutex::new(None),
            cloned: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            source,
            cloner: Mutex::new(None),
        })
    }

    /// The voice `which` names (`exaggeration`: a WAV's, when it is cloned now).
    pub fn get(&self, which: Option<&VoiceRef>, exaggeration: f32, keep_going: &dyn Fn() -> bool) -> Result<Arc<Voice>> {
        match which {
            None => self.builtin.clone().ok_or_else(|| {
                TtsError::InvalidArgument(
                    "the model folder has no conds.safetensors: pass a voice (a WAV clip, a conds.safetensors path or a Voice)".into(),
                )
            }),
            Some(VoiceRef::Cloned(id)) => self.lock_cloned().get(id).map(|c| c.voice.clone()).ok_or_else(|| gone(*id)),
            Some(VoiceRef::File(path)) => self.file_voice(path, exaggeration, keep_going),
        }
    }

    fn file_voice(&self, path: &Path, exaggeration: f32, keep_going: &dyn Fn() -> bool) -> Result<Arc<Voice>> {
        let key = VoiceKey::of(Some(&VoiceRef::File(path.to_path_buf())));
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, voice)) = slot.as_ref() {
            if *k == key {
                return Ok(voice.clone());
            }
        }
        Voice::check_path(path)?;
        let voice = if is_clip(path)? {
            let clip = read_wav(path)?;
            let tensors = self.cloner()?.conditionals(&clip, ClipSource::File, exaggeration, keep_going)?;
            Voice::from_tensors(tensors, path)?
        } else {
            Voice::load(path)?
        };
        let voice = Arc::new(voice);
        *slot = Some((key, voice.clone()));
        Ok(voice)
    }

    /// Clones a voice from `clip`; returns its id.
    pub fn create(&self, clip: &Clip, source: ClipSource, exaggeration: f32, keep_going: &dyn Fn() -> bool) -> Result<u32> {
        let map = self.cloner()?.conditionals(clip, source, exaggeration, keep_going)?;
        let mut tensors: Vec<(String, Array)> = map.iter().map(|(k, a)| (k.clone(), a.clone())).collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let voice = Arc::new(Voice::from_tensors(map, Path::new("the cloned voice"))?);
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.lock_cloned().insert(id, Cloned { voice, tensors });
        Ok(id)
    }

    /// Writes voice `id` as a `conds.safetensors` that mlx-audio (and `voice: path`) reads.
    pub fn save(&self, id: u32, path: &Path) -> Result<()> {
        let tensors = self.lock_cloned().get(&id).map(|c| c.tensors.clone()).ok_or_else(|| gone(id))?;
        lm::cache::write_safetensors(path, &tensors, &[("format".to_string(), "mlx".to_string())])
    }

    /// Forgets voice `id` (its memory goes once no call uses it).
    pub fn remove(&self, id: u32) {
        self.lock_cloned().remove(&id);
    }

    fn lock_cloned(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Cloned>> {
        self.cloned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cloning's networks, loaded at the first clone.
    fn cloner(&self) -> Result<Arc<VoiceCloner>> {
        let mut slot = self.cloner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let s = &self.source;
        let tokenizer = s.tokenizer.as_ref().map_err(|why| TtsError::ModelNotFound(why.clone()))?;
        let flavor = if s.turbo { Flavor::Turbo } else { Flavor::Chatterbox };
        let cloner = Arc::new(VoiceCloner::load(&s.dir, tokenizer, s.prompt_len, flavor)?);
        *slot = Some(cloner.clone());
        Ok(cloner)
    }
}

fn gone(id: u32) -> TtsError {
    TtsError::Disposed(format!("voice {id} has been disposed"))
}
