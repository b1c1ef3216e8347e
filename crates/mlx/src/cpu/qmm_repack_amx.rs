//! The repacked fast kernel's rows on AMX tiles (Sapphire Rapids and later
//! Xeons): the integer sums of a batch's or a prompt's rows by `tdpbsud`,
//! the float steps as on every other path, so the same bits.
//!
//! Per pair of tiles (sixteen output columns) and block of eight rows:
//! - tile B (weights, `tdpbsud`'s unsigned operand): a group's weights
//!   unpacked to one byte each, row `s` holding the sixteen columns' weights
//!   `4 s .. 4 s + 4`: what the 512-bit path unpacks into a vector per slot
//!   (`x86::tiles_avx512_wide`), stored. Laid out once per pair and `CHUNK`
//!   of rows, for all of the chunk's blocks.
//! - tile A (`x`, signed): the block's quantized rows as they lie, each row's
//!   `hi` then `lo` part (`Packed::xq`), so sixteen tile rows of a group's
//!   bytes at a stride of `k`.
//! - tile C: per row `r` the sixteen columns' `q . hi` (C row `2 r`) and
//!   `q . lo` (row `2 r + 1`), exact in i32, then `256 * hi + lo` and
//!   `add_group`'s float steps on sixteen lanes (each lane's operations and
//!   order are those of its column on the 256-bit paths).
//!
//! Tiles hold 64 bytes a row, so a group of 128 takes two `tdpbsud` into one C.
//! The tile state is configured at the start of each thread's share of a call
//! and released at its end. Linux grants it per process on request
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, `granted`); without the grant the
//! instructions fault, so nothing runs them before it.
use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;

use super::x86::{pair_scale_bias, pair_slot, pair_vector, prefetch_packed, tiles_avx512vnni};
use super::{tile_words, Packed};
use crate::cpu::kernel::OutPtr;
use crate::cpu::qmm::avx2::store_lanes;
use crate::cpu::qmm_int8::{CHUNK, TILE};

/// Fewer rows than this take the 512-bit VNNI path, which is as fast or
/// faster there: a tile's float steps and stores cost the same whatever
/// number of its rows hold rows of `x`, and the 512-bit path's cost grows
/// with the rows (`docs/kernels.md#fast-precision`: even at 8 to 12 rows,
/// AMX ahead from 16 on 1024 -> 3072, from 32 on 3072 -> 1024).
pub(super) const MIN_ROWS: usize = 16;
/// Rows of `x` per block: each takes two of tile A's sixteen rows.
const BLOCK: usize = 8;

/// Whether the CPU has AMX-INT8 and Linux gave this process the tile data
/// (asked once; later threads inherit it).
pub(super) fn granted() -> bool {
    static GRANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GRANTED.get_or_init(|| {
        // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx >> 24 & 1 == 0 || edx >> 25 & 1 == 0 {
            return false;
        }
        request_tile_data()
    })
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: 0 where the kernel
/// grants it (Linux 5.16 and later), an error elsewhere.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: a system call that changes only this process's permissions; it reads and writes no
    // memory of ours. The syscall instruction clobbers rcx and r11.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => ret, in("rdi") ARCH_REQ_XCOMP_PERM,
             in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

/// Other systems have no known way to ask; the tiles stay unused there.
#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// A tile configuration (palette 1): tmm0-3 C (16 rows of 16 i32); tmm4
/// and 5 A (16 rows of `kc` bytes); tmm6 and 7 B (`kc / 4` rows of 64 bytes).
#[repr(C, align(64))]
struct Config([u8; 64]);

impl Config {
    fn new(kc: usize) -> Config {
        let mut c = [0u8; 64];
        c[0] = 1;
        let shapes = [(16, 64); 4].into_iter().chain([(16, kc); 2]).chain([(kc / 4, 64); 2]);
        for (t, (rows, bytes)) in shapes.enumerate() {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(bytes as u16).to_le_bytes());
            c[48 + t] = rows as u8;
        }
        Config(c)
    }
}

/// Tile C as `tilestored` leaves it: sixteen rows of sixteen i32.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Sums([i32; 256]);

/// `tiles`' columns for every row of `p`: pairs of tiles on AMX, a range's
/// odd last tile on the 256-bit VNNI path.
///
/// # Safety
/// The CPU has AVX2, F16C, AVX-512 F, BW, VNNI and VL and AMX-INT8, and
/// `granted()` returned true; `p` and `out` are a call's checked operands.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
pub(super) unsafe fn tiles(p: &Packed, tiles: Range<usize>, out: OutPtr) {
    let paired = tiles.start..tiles.end - tiles.len() % 2;
    if !paired.is_empty() {
        let config = Config::new(p.group_size.min(64));
        asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
        // The last block's rows where it has fewer than eight, the rest zero, so that tile A
        // never reads past `xq` (none where the rows make whole blocks).
        let tail_rows = p.m % BLOCK;
        let mut tail = vec![0i8; if tail_rows > 0 { 2 * BLOCK * p.k } else { 0 }];
        tail[..2 * tail_rows * p.k].copy_from_slice(&p.xq[2 * (p.m - tail_rows) * p.k..]);
        let xq = |m0: usize| match m0 + BLOCK <= p.m {
            true => p.xq.as_ptr().add(2 * m0 * p.k),
            false => tail.as_ptr(),
        };
        // Two pairs' unpacked weights (`k / 4` rows of 64 bytes) with their scales and biases:
        // each pair is laid out while the one before it runs, so that tile B does not read
        // what the vector stores have only just written.
        let new_pair = || Pair { w: vec![_mm512_setzero_si512(); p.k / 4], sb: Vec::with_capacity(p.groups()) };
        let mut pairs = [new_pair(), new_pair()];
        let unpack = |tile: usize, pair: &mut Pair| match p.bits {
            2 => unpack::<2>(p, tile, pair),
            4 => unpack::<4>(p, tile, pair),
            _ => unpack::<8>(p, tile, pair),
        };
        let mut ring = [Sums([0; 256]); RING];
        let firsts: Vec<usize> = paired.clone().step_by(2).collect();
        for r0 in (0..p.m).step_by(CHUNK) {
            let rows = r0..(r0 + CHUNK).min(p.m);
            unpack(firsts[0], &mut pairs[0]);
            for (i, &tile) in firsts.iter().enumerate() {
                let [a, b] = &mut pairs;
                let (pair, next) = if i % 2 == 0 { (&*a, b) } else { (&*b, a) };
                if let Some(&t) = firsts.get(i + 1) {
                    unpack(t, next);
                }
                for m0 in rows.clone().step_by(BLOCK) {
                    // The pair after the next one, read from memory under the first block's work.
                    let ahead = (m0 == rows.start).then_some(tile + 4..tile + 6);
                    match p.m - m0 >= BLOCK {
                        true => block::<BLOCK>(p, m0, tile, xq(m0), pair, &mut ring, out, ahead),
                        false => block::<0>(p, m0, tile, xq(m0), pair, &mut ring, out, ahead),
                    }
                }
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
    if paired.end < tiles.end {
        tiles_avx512vnni(p, paired.end..tiles.end, out);
    }
}

/// A pair of tiles' weights as tile B's rows, and per group their sixteen
/// scales and biases widened to float32.
struct Pair {
    w: Vec<__m512i>,
    sb: Vec<[__m512; 2]>,
}

/// Tiles `tile` and `tile + 1`'s weights, one byte each, into tile B's rows:
/// row `s` (slot `s` of the repacked layout) the first tile's eight 4-byte
/// runs `4 s .. 4 s + 4`, then the second's; and their scales and biases.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
#[inline]
unsafe fn unpack<const BITS: usize>(p: &Packed, tile: usize, pair: &mut Pair) {
    let (per, tw) = (8 / BITS, tile_words(p.k, BITS));
    let (wa, wb) = (p.w.as_ptr().add(tile * tw), p.w.as_ptr().add((tile + 1) * tw));
    let mask = _mm512_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
    for u in 0..p.k * BITS / 32 {
        let w = pair_vector(wa, wb, u);
        for j in 0..per {
            *pair.w.get_unchecked_mut(u * per + j) = pair_slot::<BITS>(w, j, mask);
        }
    }
    let gw = p.groups() * p.format.group_words();
    let (sa, sb) = (p.sb.as_ptr().add(tile * gw), p.sb.as_ptr().add((tile + 1) * gw));
    pair.sb.clear();
    for g in 0..p.groups() {
        pair.sb.push(pair_scale_bias(sa, sb, p.format, g));
    }
}

/// `tdpbsud` of group `g`'s bytes of the rows at `xq` (tile A, stride `k`)
/// and of the pair's weights (tile B) into C tile `c` (0 to 3), through A and
/// B tiles 4 and 6 for an even `c`, 5 and 7 for an odd one, so that the next
/// group's loads need not wait for this group's products.
#[inline(always)]
unsafe fn group_sums(p: &Packed, xq: *const i8, w: &[__m512i], g: usize, c: usize) {
    macro_rules! tiles {
        ($c:literal, $a:literal, $b:literal) => {{
            asm!(concat!("tilezero tmm", $c), options(nostack, nomem));
            let kc = p.group_size.min(64);
            for e in (g * p.group_size..(g + 1) * p.group_size).step_by(kc) {
                asm!(
                    concat!("tileloadd tmm", $a, ", [{x} + {stride} * 1]"),
                    concat!("tileloadd tmm", $b, ", [{w} + {row} * 1]"),
                    concat!("tdpbsud tmm", $c, ", tmm", $a, ", tmm", $b),
                    x = in(reg) xq.add(e),
                    stride = in(reg) p.k,
                    w = in(reg) w.as_ptr().add(e / 4),
                    row = in(reg) 64usize,
                    options(nostack, readonly),
                );
            }
        }};
    }
    match c {
        0 => tiles!("0", "4", "6"),
        1 => tiles!("1", "5", "7"),
        2 => tiles!("2", "4", "6"),
        _ => tiles!("3", "5", "7"),
    }
}

/// C tile `c` (0 to 3) into `to`.
#[inline(always)]
unsafe fn store(c: usize, to: &mut [i32; 256]) {
    macro_rules! store {
        ($c:literal) => {
            asm!(concat!("tilestored [{to} + {row} * 1], tmm", $c), to = in(reg) to.as_mut_ptr(), row = in(reg) 64usize, options(nostack))
        };
    }
    match c {
        0 => store!("0"),
        1 => store!("1"),
        2 => store!("2"),
        _ => store!("3"),
    }
}

/// Groups whose products run ahead of the float steps, and the sums held
/// for them (one per C tile).
const LEAD: usize = 2;
const RING: usize = 4;

/// Rows `m0..` of tiles `tile` and `tile + 1`, their quantized rows at `xq`
/// (stride `k`): `ROWS` of them (`BLOCK`), or `m - m0` (0), so that a whole
/// block's count is a constant and its accumulators stay in registers.
///
/// Group `g + LEAD`'s products (tile C taken four in turn, A and B two in
/// turn) are issued before group `g`'s float steps, so that the tiles and
/// the vector units work at once, and the sums between them stay in L1.
/// The float steps: `256 * hi + lo` (C row `2 r` row `r`'s `q . hi`, `2 r + 1`
/// its `q . lo`), then `add_group`'s, in its order, on sixteen lanes.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const ROWS: usize>(
    p: &Packed,
    m0: usize,
    tile: usize,
    xq: *const i8,
    pair: &Pair,
    ring: &mut [Sums; RING],
    out: OutPtr,
    ahead: Option<Range<usize>>,
) {
    let groups = p.groups();
    let rows = if ROWS == BLOCK { BLOCK } else { p.m - m0 };
    let mut acc = [_mm512_setzero_ps(); BLOCK];
    let product = |g: usize, ring: &mut [Sums; RING]| {
        group_sums(p, xq, &pair.w, g, g % RING);
        store(g % RING, &mut ring.get_unchecked_mut(g % RING).0);
    };
    for g in 0..LEAD.min(groups) {
        product(g, ring);
    }
    for g in 0..groups {
        if g + LEAD < groups {
            product(g + LEAD, ring);
        }
        if let Some(t) = &ahead {
            prefetch_packed(p, t.clone(), g, groups);
        }
        let c = &ring.get_unchecked(g % RING).0;
        let [scale, bias] = *pair.sb.get_unchecked(g);
        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
            let h = _mm512_load_si512(c.as_ptr().add(32 * r).cast());
            let l = _mm512_load_si512(c.as_ptr().add(32 * r + 16).cast());
            let isum = _mm512_add_epi32(_mm512_slli_epi32::<8>(h), l);
            let at = (m0 + r) * groups + g;
            let (d, xsum) = (*p.xd.get_unchecked(at), *p.xsum.get_unchecked(at));
            let t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scale, _mm512_set1_ps(d)));
            *acc = _mm512_add_ps(*acc, t);
            *acc = _mm512_add_ps(*acc, _mm512_mul_ps(bias, _mm512_set1_ps(xsum)));
        }
    }
    let n0 = tile * TILE;
    for (r, a) in acc.iter().enumerate().take(rows) {
        let row = out.0.add((m0 + r) * p.n);
        store_lanes(row.add(n0), _mm512_castps512_ps256(*a), p.n - n0);
        let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*a)));
        store_lanes(row.add(n0 + TILE), high, p.n - n0 - TILE);
    }
}
