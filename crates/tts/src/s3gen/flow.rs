//! Speech tokens to mel (`CausalMaskedDiffWithXvec.inference` with
//! `CausalConditionalCFM`): the encoder turns prompt + new tokens into `mu`, and
//! an Euler solver with classifier-free guidance integrates the estimator's
//! vector field from fixed noise, conditioned on the prompt mel and speaker.
//! Turbo's meanflow flow instead takes plain Euler steps (2) from fresh noise
//! drawn from the caller's keys, without guidance (`mel_meanflow`).
use lm::weights::Weights;
use mlx::nn::{Embedding, Linear};
use mlx::random::{normal, KeySequence};
use mlx::{Array, Dtype};

use super::conds::GenConds;
use super::config::S3GenConfig;
use super::encoder::{EncoderPrefix, UpsampleEncoder, ENCODER_DIMS, PRE_LOOKAHEAD, UPSAMPLE};
use super::estimator::{Estimator, Prefix, PrefixRecord, OUT_CHANNELS};
use crate::layers::linear;
use crate::{Result, TtsError};

/// S3 speech-token vocabulary (ids past it are clipped, as mlx-audio does).
pub const SPEECH_VOCAB: i32 = 6561;
pub const MEL_BINS: i32 = OUT_CHANNELS;
const XVECTOR_DIM: i32 = 192;
/// Frames of fixed noise: mlx-audio's `50 * 300` (five minutes of mel).
pub const MAX_FRAMES: i32 = 15000;
/// Guidance strength: `v = (1 + r) v_cond - r v_uncond`.
const CFG_RATE: f64 = 0.7;

/// The voice prompt as the streamed chunks read it (`S3GenFlow::prompt_cache`):
/// its tokens through the encoder and its frames at every solver step. Made
/// once per voice, it lets a chunk run the encoder over its own tokens and the
/// flow over its own frames only, where a whole render runs both over the
/// prompt's 250 tokens and 500 frames (10 s) as well. In these chunks the
/// prompt's tokens and frames do not attend to the chunk's, and its last tokens
/// look ahead into zeros (the only differences from a whole render; the
/// model's convolutions are causal but for that lookahead).
pub struct PromptCache {
    encoder: EncoderPrefix,
    steps: Vec<PrefixRecord>,
    frames: i32,
}

impl PromptCache {
    pub fn bytes(&self) -> usize {
        let encoder: usize = self.encoder.arrays().iter().map(|a| a.size() * a.dtype().size()).sum();
        encoder + self.steps.iter().map(PrefixRecord::bytes).sum::<usize>()
    }
}

/// What the solver does about the voice prompt's frames.
enum Plan<'a> {
    /// They are in the sequence, as any other frame.
    Whole,
    /// The sequence is the prompt: record each step, and stop between steps
    /// when the closure says so.
    Record(&'a mut Vec<PrefixRecord>, &'a dyn Fn() -> bool),
    /// The sequence follows the recorded prompt.
    Extend(&'a PromptCache),
}

impl Plan<'_> {
    /// The estimator's prefix at solver step `step` (from 1).
    fn prefix(&mut self, step: i32) -> Prefix<'_> {
        match self {
            Plan::Whole => Prefix::None,
            Plan::Record(steps, _) => {
                steps.push(PrefixRecord::default());
                Prefix::Record(steps.last_mut().expect("just pushed"))
            }
            Plan::Extend(cache) => Prefix::Extend(&cache.steps[step as usize - 1]),
        }
    }

    /// After step `step` of `n`: a recording evaluates the solver's `state` with the
    /// step's record (so that it holds buffers, not graphs), then asks whether to go on.
    fn after_step(&self, state: &[&Array], step: i32, n: i32) -> Result<()> {
        if let Plan::Record(steps, keep_going) = self {
            let record = steps.last().expect("pushed this step");
            mlx::eval(&[state, &record.arrays()].concat())?;
            if !keep_going() {
                return Err(TtsError::Aborted(format!("stopped while recording the voice prompt (step {step} of {n})")));
            }
        }
        Ok(())
    }
}

pub struct S3GenFlow {
    token_embedding: Embedding,
    speaker_proj: Linear,
    encoder: UpsampleEncoder,
    encoder_proj: Linear,
    estimator: Estimator,
    /// The solver's starting point, `(1, MAX_FRAMES, 80)` channels-last: the
    /// first draw after `mx.random.seed(0)`, which mlx-audio makes when it builds
    /// the model. A constant of the model, not part of any request's randomness.
    /// None for the meanflow flow, which draws its noise per call.
    noise: Option<Array>,
    n_timesteps: i32,
    meanflow: bool,
}

impl S3GenFlow {
    /// Takes the `s3gen.flow.*` tensors out of `w` (the speaker encoder and the
    /// vocoder's stay there for their owners).
    pub fn load(w: &mut Weights, cfg: &S3GenConfig) -> Result<S3GenFlow> {
        let p = "s3gen.flow";
        let token_embedding = w.embedding(&format!("{p}.input_embedding"), SPEECH_VOCAB, ENCODER_DIMS)?;
        let speaker_proj = linear(w, &format!("{p}.spk_embed_affine_layer"), XVECTOR_DIM, MEL_BINS, true)?;
        let encoder = UpsampleEncoder::load(w, &format!("{p}.encoder"), cfg.encoder_num_blocks, cfg.encoder_num_up_blocks)?;
        let encoder_proj = linear(w, &format!("{p}.encoder_proj"), ENCODER_DIMS, MEL_BINS, true)?;
        let estimator = Estimator::load(w, &format!("{p}.decoder.estimator"), cfg.decoder_n_blocks, cfg.decoder_num_mid_blocks, cfg.meanflow)?;

        // mlx-audio regenerates these at construction; a checkpoint that carries
        // them anyway (a dump of all parameters) would override the noise on
        // load, and holds the very same position table.
        let noise_name = format!("{p}.decoder.rand_noise");
        let noise = if cfg.meanflow {
            None
        } else {
            let noise = if w.contains(&noise_name) {
                w.take(&noise_name, &[1, MEL_BINS, MAX_FRAMES])?
            } else {
                let key = KeySequence::new(0)?.next()?;
                normal(&[1, MEL_BINS, MAX_FRAMES], Dtype::Float32, 0.0, 1.0, Some(&key))?
            };
            let noise = noise.swapaxes(1, 2)?.contiguous()?;
            noise.eval()?;
            Some(noise)
        };
        let tables = [format!("{p}.encoder.embed.pos_enc.pe"), format!("{p}.encoder.up_embed.pos_enc.pe")];
        w.discard(|k| tables.iter().any(|t| t == k));

        Ok(S3GenFlow { token_embedding, speaker_proj, encoder, encoder_proj, estimator, noise, n_timesteps: cfg.n_timesteps, meanflow: cfg.meanflow })
    }

    /// Mel frames `mel` returns for `tokens` new tokens, when the voice's prompt
    /// mel has two frames per prompt token (as every mlx-audio voice has).
    pub fn frames_for(tokens: usize, finalize: bool) -> usize {
        frame_count(tokens, finalize).max(0) as usize
    }

    /// The mel `(1, 80, 2 N)` for `speech_tokens` (N of them) spoken in the voice
    /// of `conds`, evaluated. The prompt's tokens and mel lead the sequence and
    /// its frames are cut from the result. Without `finalize` the last
    /// `PRE_LOOKAHEAD` tokens only serve as lookahead: their frames are dropped
    /// (before the solver runs), giving `2 (N - 3)` frames. Ids past the speech
    /// vocabulary are clipped to its last id, as mlx-audio does.
    pub fn mel(&self, speech_tokens: &[u32], conds: &GenConds, finalize: bool) -> Result<Array> {
        let mel = self.mel_graph(speech_tokens, conds, finalize)?;
        mel.eval()?;
        Ok(mel)
    }

    /// [`Self::mel`] without the evaluation, for callers that chain more work
    /// (the vocoder) onto the same graph.
    pub fn mel_graph(&self, speech_tokens: &[u32], conds: &GenConds, finalize: bool) -> Result<Array> {
        let (mu, spks, cond) = self.inputs(speech_tokens, conds, finalize)?;
        let noise = self.fixed_noise()?.slice_axis(1, 0, mu.dim(1))?;
        let prompt_frames = conds.prompt_feat.dim(1);
        let mel = self.solve(noise, &mu, &spks, &cond, Plan::Whole)?;
        Ok(mel.slice_axis(1, prompt_frames, mel.dim(1))?.swapaxes(1, 2)?)
    }

    /// Turbo's mel `(1, 80, 2 N)` for `speech_tokens` (N of them; mlx-audio's
    /// `S3Token2Mel.__call__` with `meanflow`), evaluated. Without `finalize` the last
    /// `PRE_LOOKAHEAD` tokens only look ahead, as in [`Self::mel`]: `2 (N - 3)` frames.
    /// Its noise comes from `keys` as mlx-audio draws it: first `(1, 80, 2 N)`, then one over
    /// the whole sequence, whose first frames lead the first draw (the prompt's when
    /// finalized; unfinalized, 6 frames fewer, as mlx-audio's stream chunks have it).
    pub fn mel_meanflow(&self, speech_tokens: &[u32], conds: &GenConds, finalize: bool, keys: &mut KeySequence) -> Result<Array> {
        if !self.meanflow {
            return Err(TtsError::InvalidArgument("this flow is not a meanflow one".into()));
        }
        let (mu, spks, cond) = self.inputs(speech_tokens, conds, finalize)?;
        let (frames, new) = (mu.dim(1), 2 * speech_tokens.len() as i32);
        let noised = normal(&[1, MEL_BINS, new], Dtype::Float32, 0.0, 1.0, Some(&keys.next()?))?;
        let z = normal(&[1, MEL_BINS, frames], Dtype::Float32, 0.0, 1.0, Some(&keys.next()?))?;
        let lead = (frames - new).max(0);
        let x = Array::concatenate(&[&z.slice_axis(2, 0, lead)?, &noised.slice_axis(2, 0, frames - lead)?], 2)?.swapaxes(1, 2)?;
        let x = self.solve_meanflow(x, &mu, &spks, &cond, Plan::Whole)?;
        let prompt_frames = conds.prompt_feat.dim(1);
        let mel = x.slice_axis(1, prompt_frames, x.dim(1))?.swapaxes(1, 2)?;
        mel.eval()?;
        Ok(mel)
    }

    /// Whether this is Turbo's meanflow flow (`mel_meanflow`), which has no fixed noise.
    pub fn meanflow(&self) -> bool {
        self.meanflow
    }

    /// The fixed noise (`(1, MAX_FRAMES, 80)`); the meanflow flow has none.
    fn fixed_noise(&self) -> Result<&Array> {
        self.noise.as_ref().ok_or_else(|| TtsError::InvalidArgument("the meanflow flow draws its noise per call (mel_meanflow)".into()))
    }

    /// [`Self::mel`] continuing the voice prompt recorded in `cache` (made by
    /// [`Self::prompt_cache`] for these `conds`): the solver runs over the new
    /// frames only, which attend to the prompt's but not the other way round.
    /// Its frames are the tokens' own, two each, whatever extra frame the
    /// voice's prompt mel holds.
    /// `keys`: the meanflow flow's noise for these frames (the guided flow's is fixed).
    pub fn mel_after_prompt(
        &self,
        speech_tokens: &[u32],
        conds: &GenConds,
        finalize: bool,
        cache: &PromptCache,
        keys: &mut KeySequence,
    ) -> Result<Array> {
        let p = cache.frames;
        let own = conds.prompt_tokens.len() as i32 * UPSAMPLE;
        if p != own {
            return Err(TtsError::InvalidArgument(format!("the prompt cache holds {p} frames, the voice's tokens {own}")));
        }
        let frames = frame_count(speech_tokens.len(), finalize);
        if frames <= 0 {
            return Err(no_frames(speech_tokens.len(), finalize, p));
        }
        let frames = check_noise(p as i64 + frames, speech_tokens.len())? - p;
        let spks = self.speaker(conds)?;
        let embedded = self.embed(speech_tokens, &spks)?;
        let h = self.encoder.forward_after(&embedded, &cache.encoder)?;
        let mu = self.encoder_proj.forward_rows(&h.slice_axis(1, 0, frames)?)?;
        let cond = Array::zeros(&[1, frames, MEL_BINS], mu.dtype())?;
        let noise = self.start_noise(p, frames, keys)?;
        let mel = self.solve_any(noise, &mu, &spks, &cond, Plan::Extend(cache))?;
        let mel = mel.swapaxes(1, 2)?;
        mel.eval()?;
        Ok(mel)
    }

    /// Runs the solver over the voice prompt alone and keeps what later frames
    /// read from it at every step. The prompt is its tokens' frames, two per
    /// token: a cloned voice's mel may hold one frame more (`embed_ref` keeps an
    /// odd mel when the tokens fill it), which a whole render reads as the
    /// prompt's over the first new token's first frame and then cuts with it;
    /// the chunks never hand that frame out either (`ChunkVocoder`), so the
    /// cache leaves the extra frame out and its voice streams from a cache like
    /// any other. `None` for a voice with fewer frames than that.
    /// `keep_going` is asked after every step (the whole run takes as long as a
    /// render of a short sentence); when it says no, `ABORTED`.
    pub fn prompt_cache(&self, conds: &GenConds, keep_going: &dyn Fn() -> bool) -> Result<Option<PromptCache>> {
        let frames = conds.prompt_tokens.len() as i32 * UPSAMPLE;
        if conds.prompt_tokens.is_empty() || conds.prompt_feat.dim(1) < frames {
            return Ok(None);
        }
        let spks = self.speaker(conds)?;
        let Some((h, encoder)) = self.encoder.record(&self.embed(&conds.prompt_tokens, &spks)?)? else {
            return Ok(None);
        };
        let mu = self.encoder_proj.forward(&h)?;
        let cond = conds.prompt_feat.slice_axis(1, 0, frames)?.astype(mu.dtype())?;
        let mut steps = Vec::new();
        // The meanflow flow's prompt noise is drawn once, a constant of the cache, as the
        // guided flow's fixed noise is of the model (whole renders draw it per call).
        let noise = self.start_noise(0, frames, &mut KeySequence::new(0)?)?;
        self.solve_any(noise, &mu, &spks, &cond, Plan::Record(&mut steps, keep_going))?;
        mlx::eval(&encoder.arrays())?;
        Ok(Some(PromptCache { encoder, steps, frames }))
    }

    /// Ids for the encoder, past-vocabulary ids clipped as mlx-audio does: `(1, N)`.
    fn token_ids<'a>(&self, ids: impl IntoIterator<Item = &'a u32>) -> Result<Array> {
        let max_id = (SPEECH_VOCAB - 1) as u32;
        let ids: Vec<i32> = ids.into_iter().map(|&t| t.min(max_id) as i32).collect();
        Ok(Array::from_slice(&ids, &[1, ids.len() as i32])?)
    }

    /// The encoder's input for `ids`: `(1, N, 512)`. mlx-audio multiplies the
    /// embeddings by a padding mask in the speaker projection's dtype, which for
    /// float16 or bfloat16 weights and a float32 voice makes them float32, so
    /// that its encoder runs in float32; here the same promotion, without the
    /// mask (one sequence: nothing is padded).
    fn embed<'a>(&self, ids: impl IntoIterator<Item = &'a u32>, spks: &Array) -> Result<Array> {
        let emb = self.token_embedding.forward(&self.token_ids(ids)?)?;
        if emb.dtype() == spks.dtype() {
            return Ok(emb);
        }
        Ok(emb.multiply(&Array::ones(&[1], spks.dtype())?)?)
    }

    /// The speaker embedding, normalised and projected to 80 channels: `(1, 80)`.
    fn speaker(&self, conds: &GenConds) -> Result<Array> {
        let emb = &conds.embedding;
        let norm = emb.square()?.sum(&[1], true)?.sqrt()?;
        Ok(self.speaker_proj.forward(&emb.divide(&norm.add_scalar(1e-8)?)?)?)
    }

    /// The solver's inputs over prompt + new frames, `(1, frames, 80)` each but
    /// the speaker `(1, 80)`: `mu`, speaker, prompt mel then zeros.
    fn inputs(&self, speech_tokens: &[u32], conds: &GenConds, finalize: bool) -> Result<(Array, Array, Array)> {
        let prompt_frames = conds.prompt_feat.dim(1);
        let frames = frame_count(conds.prompt_tokens.len() + speech_tokens.len(), finalize);
        if frames <= prompt_frames as i64 {
            return Err(no_frames(speech_tokens.len(), finalize, prompt_frames));
        }
        let frames = check_noise(frames, speech_tokens.len())?;

        let spks = self.speaker(conds)?;
        let h = self.encoder.forward(&self.embed(conds.prompt_tokens.iter().chain(speech_tokens), &spks)?)?;
        let mu = self.encoder_proj.forward(&h.slice_axis(1, 0, frames)?)?;

        let prompt_feat = conds.prompt_feat.astype(mu.dtype())?;
        let tail = Array::zeros(&[1, frames - prompt_frames, MEL_BINS], mu.dtype())?;
        let cond = Array::concatenate(&[&prompt_feat, &tail], 1)?;
        Ok((mu, spks, cond))
    }

    /// Euler steps on a cosine schedule `t = 1 - cos(pi/2 s)`, `s` uniform in
    /// [0, 1]; each step runs the conditional and the unconditional (zeroed
    /// `mu`, speaker and prompt) estimates as one batch of two. The time
    /// arithmetic stays on the device, as in mlx-audio, so no host sync
    /// (except when recording the prompt: each step's record is evaluated, so
    /// that it holds buffers, not graphs).
    fn solve(&self, mut x: Array, mu: &Array, spks: &Array, cond: &Array, mut plan: Plan) -> Result<Array> {
        let n = self.n_timesteps;
        let s = Array::arange(0.0, (n + 1) as f64, 1.0, Dtype::Float32)?.divide_scalar(n as f64)?;
        let schedule = s.multiply_scalar(0.5)?.multiply_scalar(std::f64::consts::PI)?.cos()?;
        let schedule = schedule.scalar_like(1.0)?.subtract(&schedule)?;
        let at = |i: i32| schedule.slice_axis(0, i, i + 1);

        let pair = |a: &Array| -> mlx::Result<Array> { Array::concatenate(&[a, &Array::zeros(&a.shape(), a.dtype())?], 0) };
        let (mu2, spks2, cond2) = (pair(mu)?, pair(spks)?, pair(cond)?);

        let mut t = at(0)?;
        let mut dt = at(1)?.subtract(&at(0)?)?;
        for step in 1..=n {
            let prefix = plan.prefix(step);
            let v =
                self.estimator.forward(&Array::concatenate(&[&x, &x], 0)?, &mu2, &Array::concatenate(&[&t, &t], 0)?, None, &spks2, &cond2, prefix)?;
            let v_cond = v.slice_axis(0, 0, 1)?;
            let v_uncond = v.slice_axis(0, 1, 2)?;
            let v = v_cond.multiply_scalar(1.0 + CFG_RATE)?.subtract(&v_uncond.multiply_scalar(CFG_RATE)?)?;
            x = x.add(&dt.multiply(&v)?)?;
            t = t.add(&dt)?;
            if step < n {
                dt = at(step + 1)?.subtract(&t)?;
            }
            plan.after_step(&[&x, &t, &dt], step, n)?;
        }
        Ok(x)
    }

    /// Turbo's solver: plain Euler steps from `x` over `mx.linspace(0, 1, n + 1)`
    /// (`i * (1 / n)` in float32), each velocity taking the step's end time too.
    fn solve_meanflow(&self, mut x: Array, mu: &Array, spks: &Array, cond: &Array, mut plan: Plan) -> Result<Array> {
        let n = self.n_timesteps;
        let span = Array::arange(0.0, (n + 1) as f64, 1.0, Dtype::Float32)?.multiply_scalar(1.0 / n as f64)?;
        for step in 1..=n {
            let (t, r) = (span.slice_axis(0, step - 1, step)?, span.slice_axis(0, step, step + 1)?);
            let v = self.estimator.forward(&x, mu, &t, Some(&r), spks, cond, plan.prefix(step))?;
            x = x.add(&r.subtract(&t)?.multiply(&v)?)?;
            plan.after_step(&[&x], step, n)?;
        }
        Ok(x)
    }

    /// The solver of this flow: guided (`solve`) or meanflow (`solve_meanflow`).
    fn solve_any(&self, x: Array, mu: &Array, spks: &Array, cond: &Array, plan: Plan) -> Result<Array> {
        match self.meanflow {
            true => self.solve_meanflow(x, mu, spks, cond, plan),
            false => self.solve(x, mu, spks, cond, plan),
        }
    }

    /// The solver's starting point for `frames` frames from frame `from` on: the fixed
    /// noise, or for the meanflow flow a fresh draw from `keys` (`(1, 80, frames)`, as
    /// mlx-audio draws it), `(1, frames, 80)`.
    fn start_noise(&self, from: i32, frames: i32, keys: &mut KeySequence) -> Result<Array> {
        match self.meanflow {
            true => Ok(normal(&[1, MEL_BINS, frames], Dtype::Float32, 0.0, 1.0, Some(&keys.next()?))?.swapaxes(1, 2)?),
            false => Ok(self.fixed_noise()?.slice_axis(1, from, from + frames)?),
        }
    }
}

/// Mel frames the encoder's output is cut to for `tokens` tokens: two per
/// token, less the lookahead tokens' unless `finalize`.
fn frame_count(tokens: usize, finalize: bool) -> i64 {
    let frames = tokens as i64 * UPSAMPLE as i64;
    if finalize {
        frames
    } else {
        frames - (PRE_LOOKAHEAD * UPSAMPLE) as i64
    }
}

fn no_frames(tokens: usize, finalize: bool, prompt_frames: i32) -> TtsError {
    TtsError::InvalidArgument(format!(
        "{tokens} speech tokens (finalize: {finalize}) give no mel frames after the voice's {prompt_frames} prompt frames"
    ))
}

/// `frames` (prompt included) as an `i32`, if the flow's fixed noise covers them.
fn check_noise(frames: i64, tokens: usize) -> Result<i32> {
    if frames > MAX_FRAMES as i64 {
        return Err(TtsError::InvalidArgument(format!(
            "{tokens} speech tokens need {frames} mel frames with the voice prompt; the flow's noise covers {MAX_FRAMES}"
        )));
    }
    Ok(frames as i32)
}
