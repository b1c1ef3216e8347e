//! mlx-audio's Chatterbox Turbo names its S3Gen tensors after the PyTorch modules
//! (`s3gen.decoder.estimator.down_blocks.0.transformer_blocks.0.attn1.to_q`, HiFT's
//! convolutions wrapped in `.conv`), where its Chatterbox has them under `s3gen.flow` with
//! its own names (`down_blocks_0.transformer_0.attn.query_proj`). The arrays are the same
//! (checked against both models' parameter trees); this renames a Turbo checkpoint's onto
//! the names the flow and the vocoder load. Turbo's speaker encoders, used only for voice
//! cloning, have their own module names too (CAMPPlus's `shortcut_conv`, `tdnn.bn`, `out_bn`
//! for Chatterbox's `shortcut.0`, `tdnn.nonlinear.0`, `out_nonlinear.0`; the voice encoder's
//! `ve.lstm1` for `ve.lstm.layers.0`): renamed onto Chatterbox's as well.
use lm::weights::Weights;

use crate::Result;

/// Renames every `s3gen.*` and `ve.*` tensor of a Turbo checkpoint (see the module notes).
pub fn rename(w: &mut Weights) -> Result<()> {
    for name in w.names() {
        let new = if let Some(rest) = name.strip_prefix("s3gen.") {
            chatterbox_name(rest).map(|n| format!("s3gen.{n}"))
        } else if let Some(rest) = name.strip_prefix("ve.") {
            voice_encoder_name(rest).map(|n| format!("ve.{n}"))
        } else {
            None
        };
        let Some(new) = new else { continue };
        if new != name {
            w.rewrite(&name, |a| Ok(vec![(new, a.clone())]))?;
        }
    }
    Ok(())
}

/// The Chatterbox name of Turbo's `s3gen.{rest}`; None: kept as it is.
fn chatterbox_name(rest: &str) -> Option<String> {
    let seg: Vec<&str> = rest.split('.').collect();
    match seg[0] {
        "speaker_encoder" => Some(format!("speaker_encoder.{}", campplus_name(&seg[1..]))),
        // HiFT: `conv_pre.conv.weight` -> `conv_pre.weight`.
        "mel2wav" => {
            let n = seg.len();
            if n >= 3 && seg[n - 2] == "conv" {
                Some([&seg[..n - 2], &seg[n - 1..]].concat().join("."))
            } else {
                None
            }
        }
        _ => Some(format!("flow.{}", flow_name(&seg))),
    }
}

/// Turbo's CAMPPlus names (its modules hold `bn`, `bn1`, `bn2`, `out_bn`, `shortcut_conv`,
/// `shortcut_bn` where Chatterbox's hold `nonlinear.0`, `nonlinear1.0`, `nonlinear2.0`,
/// `out_nonlinear.0`, `shortcut.0`, `shortcut.1`). PyTorch's names (`xvector.*`, which
/// `CamPlus::load` reads as they are) pass unchanged.
fn campplus_name(seg: &[&str]) -> String {
    let head = seg.first() == Some(&"head");
    let renamed: Vec<&str> = seg
        .iter()
        .map(|&s| match s {
            "shortcut_conv" if head => "shortcut.0",
            "shortcut_bn" if head => "shortcut.1",
            "bn" if !head => "nonlinear.0",
            "bn1" if !head => "nonlinear1.0",
            "bn2" if !head => "nonlinear2.0",
            "out_bn" => "out_nonlinear.0",
            other => other,
        })
        .collect();
    renamed.join(".")
}

/// Turbo's voice encoder names: `lstm1.Wx` is `lstm.layers.0.Wx` (three separate LSTMs where
/// Chatterbox's has a stack); None: kept.
fn voice_encoder_name(rest: &str) -> Option<String> {
    let (layer, leaf) = rest.split_once('.')?;
    let n: usize = layer.strip_prefix("lstm")?.parse().ok()?;
    (1..=3).contains(&n).then(|| format!("lstm.layers.{}.{leaf}", n - 1))
}

fn flow_name(seg: &[&str]) -> String {
    let mut out: Vec<String> = Vec::with_capacity(seg.len());
    let mut i = 0;
    let at = |j: usize| seg.get(j).copied().unwrap_or("");
    let is_index = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    while i < seg.len() {
        let (s, next) = (seg[i], at(i + 1));
        match s {
            // Lists: `encoders.0` -> `encoders_0`, `transformer_blocks.0` -> `transformer_0`.
            "encoders" | "up_encoders" | "down_blocks" | "mid_blocks" | "up_blocks" if is_index(next) => {
                out.push(format!("{s}_{next}"));
                i += 2;
            }
            "transformer_blocks" if is_index(next) => {
                out.push(format!("transformer_{next}"));
                i += 2;
            }
            "to_out" if next == "0" => {
                out.push("out_proj".into());
                i += 2;
            }
            // `ff.net.0.proj` -> `ff.layers.0`, `ff.net.1` -> `ff.layers.1`.
            "ff" if next == "net" => {
                let which = if at(i + 2) == "0" { "0" } else { "1" };
                out.extend(["ff".to_string(), "layers".to_string(), which.to_string()]);
                i += 3;
                if at(i) == "proj" {
                    i += 1;
                }
            }
            // `block1.block.0.conv.conv` -> `block1.conv.conv`; `block1.block.2` -> `block1.norm`.
            "block1" | "block2" | "final_block" if next == "block" => {
                out.push(s.into());
                if at(i + 2) != "0" {
                    out.push("norm".into());
                }
                i += 3;
            }
            "mlp" if is_index(next) && out.last().is_some_and(|p| p == "resnet") => {
                out.push("mlp_linear".into());
                i += 2;
            }
            // Convolutions one wrapper shallower: `res_conv.conv` -> `res_conv`,
            // `downsample.conv.conv` -> `downsample.conv`.
            "res_conv" | "final_proj" if next == "conv" => {
                out.push(s.into());
                i += 2;
            }
            "downsample" | "upsample" if next == "conv" => {
                out.extend([s.to_string(), "conv".to_string()]);
                i += 3;
            }
            _ => {
                let renamed = match s {
                    "attn1" => "attn",
                    "to_q" => "query_proj",
                    "to_k" => "key_proj",
                    "to_v" => "value_proj",
                    other => other,
                };
                out.push(renamed.into());
                i += 1;
            }
        }
    }
    out.join(".")
}

#[cfg(test)]
mod tests {
    use super::{chatterbox_name, voice_encoder_name};

    // Pairs from the two mlx-audio models' parameter trees.
    #[test]
    fn turbo_names_map_onto_chatterbox_names() {
        for (turbo, chatterbox) in [
            ("encoder.encoders.0.self_attn.linear_q.weight", "flow.encoder.encoders_0.self_attn.linear_q.weight"),
            ("encoder.up_encoders.3.norm_ff.bias", "flow.encoder.up_encoders_3.norm_ff.bias"),
            ("input_embedding.weight", "flow.input_embedding.weight"),
            (
                "decoder.estimator.down_blocks.0.transformer_blocks.1.attn1.to_q.weight",
                "flow.decoder.estimator.down_blocks_0.transformer_1.attn.query_proj.weight",
            ),
            (
                "decoder.estimator.mid_blocks.11.transformer_blocks.0.attn1.to_out.0.bias",
                "flow.decoder.estimator.mid_blocks_11.transformer_0.attn.out_proj.bias",
            ),
            (
                "decoder.estimator.up_blocks.0.transformer_blocks.0.ff.net.0.proj.weight",
                "flow.decoder.estimator.up_blocks_0.transformer_0.ff.layers.0.weight",
            ),
            ("decoder.estimator.up_blocks.0.transformer_blocks.0.ff.net.1.bias", "flow.decoder.estimator.up_blocks_0.transformer_0.ff.layers.1.bias"),
            (
                "decoder.estimator.down_blocks.0.resnet.block1.block.0.conv.conv.weight",
                "flow.decoder.estimator.down_blocks_0.resnet.block1.conv.conv.weight",
            ),
            ("decoder.estimator.down_blocks.0.resnet.block2.block.1.bias", "flow.decoder.estimator.down_blocks_0.resnet.block2.norm.bias"),
            ("decoder.estimator.mid_blocks.0.resnet.mlp.0.weight", "flow.decoder.estimator.mid_blocks_0.resnet.mlp_linear.weight"),
            ("decoder.estimator.mid_blocks.0.resnet.res_conv.conv.bias", "flow.decoder.estimator.mid_blocks_0.resnet.res_conv.bias"),
            ("decoder.estimator.down_blocks.0.downsample.conv.conv.weight", "flow.decoder.estimator.down_blocks_0.downsample.conv.weight"),
            ("decoder.estimator.final_block.block.0.conv.conv.bias", "flow.decoder.estimator.final_block.conv.conv.bias"),
            ("decoder.estimator.final_proj.conv.weight", "flow.decoder.estimator.final_proj.weight"),
            ("decoder.estimator.time_embed_mixer.weight", "flow.decoder.estimator.time_embed_mixer.weight"),
            ("mel2wav.resblocks.4.convs2.1.conv.weight", "mel2wav.resblocks.4.convs2.1.weight"),
            ("mel2wav.f0_predictor.condnet.2.conv.bias", "mel2wav.f0_predictor.condnet.2.bias"),
        ] {
            assert_eq!(chatterbox_name(turbo).as_deref(), Some(chatterbox), "{turbo}");
        }
        assert_eq!(chatterbox_name("mel2wav.m_source.l_linear.weight"), None);
    }

    // Pairs from the two mlx-audio models' CAMPPlus and voice encoder parameter trees.
    #[test]
    fn turbo_speaker_encoder_names_map_onto_chatterbox_names() {
        for (turbo, chatterbox) in [
            ("speaker_encoder.head.conv1.weight", "speaker_encoder.head.conv1.weight"),
            ("speaker_encoder.head.bn1.running_var", "speaker_encoder.head.bn1.running_var"),
            ("speaker_encoder.head.layer1.0.shortcut_conv.weight", "speaker_encoder.head.layer1.0.shortcut.0.weight"),
            ("speaker_encoder.head.layer2.0.shortcut_bn.bias", "speaker_encoder.head.layer2.0.shortcut.1.bias"),
            ("speaker_encoder.tdnn.bn.running_mean", "speaker_encoder.tdnn.nonlinear.0.running_mean"),
            ("speaker_encoder.blocks.1.layers.23.bn1.weight", "speaker_encoder.blocks.1.layers.23.nonlinear1.0.weight"),
            ("speaker_encoder.blocks.0.layers.0.bn2.bias", "speaker_encoder.blocks.0.layers.0.nonlinear2.0.bias"),
            ("speaker_encoder.blocks.2.layers.3.cam_layer.linear_local.weight", "speaker_encoder.blocks.2.layers.3.cam_layer.linear_local.weight"),
            ("speaker_encoder.transits.2.bn.running_var", "speaker_encoder.transits.2.nonlinear.0.running_var"),
            ("speaker_encoder.out_bn.weight", "speaker_encoder.out_nonlinear.0.weight"),
            ("speaker_encoder.dense.bn.running_mean", "speaker_encoder.dense.nonlinear.0.running_mean"),
            ("speaker_encoder.dense.linear.weight", "speaker_encoder.dense.linear.weight"),
            (
                "speaker_encoder.xvector.block1.tdnnd1.nonlinear1.batchnorm.weight",
                "speaker_encoder.xvector.block1.tdnnd1.nonlinear1.batchnorm.weight",
            ),
        ] {
            assert_eq!(chatterbox_name(turbo).as_deref(), Some(chatterbox), "{turbo}");
        }
        assert_eq!(voice_encoder_name("lstm1.Wx").as_deref(), Some("lstm.layers.0.Wx"));
        assert_eq!(voice_encoder_name("lstm3.bias").as_deref(), Some("lstm.layers.2.bias"));
        assert_eq!(voice_encoder_name("proj.weight"), None);
        assert_eq!(voice_encoder_name("lstm.weight_ih_l0"), None);
    }
}
