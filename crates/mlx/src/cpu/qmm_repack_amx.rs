//! The repacked fast kernel's rows on AMX tiles (Sapphire Rapids and later
//! Xeons): the integer sums of a batch's or a prompt's rows by `tdpbsud`,
//! the float steps as on every other path, so the same bits.
//!
//! Per pair of tiles (sixteen output columns) and block of rows, in one of
//! two layouts:
//! - Parts (8-bit weights, and groups of 64 or 128): blocks of eight rows.
//!   Tile B (weights, `tdpbsud`'s unsigned operand): a group's weights
//!   unpacked to one byte each, row `s` holding the sixteen columns' weights
//!   `4 s .. 4 s + 4`: what the 512-bit path unpacks into a vector per slot
//!   (`x86::tiles_avx512_wide`), stored. Tile A (`x`, signed): the block's
//!   quantized rows as they lie, each row's `hi` then `lo` part
//!   (`Packed::xq`), so sixteen tile rows of a group's bytes at a stride of
//!   `k`. Tile C: per row `r` the sixteen columns' `q . hi` (C row `2 r`) and
//!   `q . lo` (row `2 r + 1`), exact in i32, joined as `(hi << s) + lo`.
//! - Joined (2- and 4-bit weights in groups of 32, GGUF's Q4_0 and Q4_1):
//!   blocks of sixteen rows. Tile A: each row's `hi` and `lo` interleaved a
//!   byte each (`chunk_rows`); tile B: each weight `q` as the two bytes `16
//!   q` (at most 240) and `q`; so tile C row `r` is `16 q . hi + q . lo`,
//!   the other paths' `isum` at `lo_shift` 4, in one product. A group of 32
//!   fills a whole 64-byte tile row this way, where as separate parts it
//!   fills half of one, and C holds sixteen rows' sums instead of eight: a
//!   384 x 1024 -> 3072 call in groups of 32 took 4.9-5.1 ms against
//!   6.5 ms.
//!
//! Then each row's `add_group` float steps on sixteen lanes (each lane's
//! operations and order are those of its column on the 256-bit paths).
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
use crate::cpu::qmm_quantize::lo_shift;

/// Fewer rows than this take the 512-bit VNNI path, which is as fast or
/// faster there: a tile's float steps and stores cost the same whatever
/// number of its rows hold rows of `x`, and the 512-bit path's cost grows
/// with the rows (`docs/kernels.md#fast-precision`: even at 8 to 12 rows,
/// AMX ahead from 16 on 1024 -> 3072, from 32 on 3072 -> 1024).
pub(super) const MIN_ROWS: usize = 16;
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
        // Joined where it saves work: groups of 32 fill half of a 64-byte tile row as separate
        // parts, a whole one interleaved (larger groups fill whole rows either way).
        match p.bits != 8 && p.group_size == 32 {
            true => pairs::<true>(p, paired.clone(), out),
            false => pairs::<false>(p, paired.clone(), out),
        }
    }
    if paired.end < tiles.end {
        tiles_avx512vnni(p, paired.end..tiles.end, out);
    }
}

/// Rows of `x` per block: tile A's sixteen rows hold sixteen rows' `hi` and
/// `lo` interleaved (`JOINED`), or eight rows' `hi` and `lo` parts in turn.
const fn block_rows(joined: bool) -> usize {
    if joined {
        16
    } else {
        8
    }
}

/// Bytes of tile A (and of tile B's rows, times four) per weight: 2 where
/// `hi` and `lo` are interleaved, 1 where they are rows of their own.
const fn per_weight(joined: bool) -> usize {
    if joined {
        2
    } else {
        1
    }
}

/// `paired`'s tiles (an even number of them) for every row of `p`, in chunks
/// of `CHUNK` rows (their tile A bytes, `chunk_rows`, stay in L2).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
unsafe fn pairs<const JOINED: bool>(p: &Packed, paired: Range<usize>, out: OutPtr) {
    let kc = (per_weight(JOINED) * p.group_size).min(64);
    let config = Config::new(kc);
    asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
    // Two pairs' unpacked weights (tile B's rows of 64 bytes) with their scales and biases: each
    // pair is laid out while the one before it runs, so that tile B does not read what the vector
    // stores have only just written.
    let new_pair = || Pair { w: vec![_mm512_setzero_si512(); per_weight(JOINED) * p.k / 4], sb: Vec::with_capacity(p.groups()) };
    let mut pairs = [new_pair(), new_pair()];
    let unpack = |tile: usize, pair: &mut Pair| match p.bits {
        2 => unpack::<2, JOINED>(p, tile, pair),
        4 => unpack::<4, JOINED>(p, tile, pair),
        _ => unpack::<8, JOINED>(p, tile, pair),
    };
    let mut ring = [Sums([0; 256]); RING];
    // Tile A's rows: where joined, each chunk's interleaved; otherwise `xq`'s as they lie, but
    // for a last block of fewer than eight rows, copied with zero rows after them so that tile A
    // never reads past `xq`.
    let mut chunk = Vec::new();
    let tail_rows = if JOINED { 0 } else { p.m % block_rows(false) };
    let mut tail = vec![0i8; if tail_rows > 0 { 2 * block_rows(false) * p.k } else { 0 }];
    tail[..2 * tail_rows * p.k].copy_from_slice(&p.xq[2 * (p.m - tail_rows) * p.k..]);
    let firsts: Vec<usize> = paired.step_by(2).collect();
    for r0 in (0..p.m).step_by(CHUNK) {
        let rows = r0..(r0 + CHUNK).min(p.m);
        if JOINED {
            chunk_rows(p, rows.clone(), &mut chunk);
        }
        unpack(firsts[0], &mut pairs[0]);
        for (i, &tile) in firsts.iter().enumerate() {
            let [a, b] = &mut pairs;
            let (pair, next) = if i % 2 == 0 { (&*a, b) } else { (&*b, a) };
            if let Some(&t) = firsts.get(i + 1) {
                unpack(t, next);
            }
            for m0 in rows.clone().step_by(block_rows(JOINED)) {
                // The pair after the next one, read from memory under the first block's work.
                let ahead = (m0 == rows.start).then_some(tile + 4..tile + 6);
                let xa = match (JOINED, m0 + block_rows(JOINED) <= p.m) {
                    (true, _) => chunk.as_ptr().add((m0 - r0) * 2 * p.k),
                    (false, true) => p.xq.as_ptr().add(2 * m0 * p.k),
                    (false, false) => tail.as_ptr(),
                };
                match p.m - m0 >= block_rows(JOINED) {
                    true => block::<true, JOINED>(p, m0, tile, xa, pair, &mut ring, out, ahead),
                    false => block::<false, JOINED>(p, m0, tile, xa, pair, &mut ring, out, ahead),
                }
            }
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}

/// Tile A's bytes for `rows` of `x` (`Packed::xq`, each row's `hi` then `lo`
/// part) into `to`, joined: per row `2 k` bytes, `hi` and `lo` interleaved a
/// byte each. Rows past `x`'s last, up to a whole block, hold zeros or an
/// earlier chunk's bytes: tile A reads them, but their sums are never stored.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
#[inline]
unsafe fn chunk_rows(p: &Packed, rows: Range<usize>, to: &mut Vec<i8>) {
    let k = p.k;
    to.resize(rows.len().next_multiple_of(block_rows(true)) * 2 * k, 0);
    let from = &p.xq[2 * rows.start * k..2 * rows.end * k];
    // `k` is a multiple of 32 (of the group size).
    for (row, dst) in from.chunks_exact(2 * k).zip(to.chunks_exact_mut(2 * k)) {
        for i in (0..k).step_by(32) {
            let hi = _mm512_cvtepu8_epi16(_mm256_loadu_si256(row.as_ptr().add(i).cast()));
            let lo = _mm512_cvtepu8_epi16(_mm256_loadu_si256(row.as_ptr().add(k + i).cast()));
            _mm512_storeu_si512(dst.as_mut_ptr().add(2 * i).cast(), _mm512_or_si512(hi, _mm512_slli_epi16::<8>(lo)));
        }
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
/// `JOINED` (2- and 4-bit weights, `16 q` fits a byte): each run `[a, b, c,
/// d]` becomes two, `[16 a, a, 16 b, b]` and `[16 c, c, 16 d, d]`, so that
/// against interleaved `hi` and `lo` bytes one product sums `16 q . hi + q .
/// lo`, the other paths' `isum` at `lo_shift` 4.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
#[inline]
unsafe fn unpack<const BITS: usize, const JOINED: bool>(p: &Packed, tile: usize, pair: &mut Pair) {
    let (per, tw) = (8 / BITS, tile_words(p.k, BITS));
    let (wa, wb) = (p.w.as_ptr().add(tile * tw), p.w.as_ptr().add((tile + 1) * tw));
    let mask = _mm512_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
    // Per 4-byte run: bytes 0, 0, 1, 1 and 2, 2, 3, 3 (`vpshufb` indexes each 16-byte lane).
    let low = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13));
    let high = _mm512_broadcast_i32x4(_mm_setr_epi8(2, 2, 3, 3, 6, 6, 7, 7, 10, 10, 11, 11, 14, 14, 15, 15));
    for u in 0..p.k * BITS / 32 {
        let w = pair_vector(wa, wb, u);
        for j in 0..per {
            let slot = pair_slot::<BITS>(w, j, mask);
            if JOINED {
                // Even bytes from the copy shifted up by 4 in each 16-bit half: 16 a (a < 16).
                let times16 = |v: __m512i| _mm512_mask_blend_epi8(0x5555_5555_5555_5555, v, _mm512_slli_epi16::<4>(v));
                let at = 2 * (u * per + j);
                *pair.w.get_unchecked_mut(at) = times16(_mm512_shuffle_epi8(slot, low));
                *pair.w.get_unchecked_mut(at + 1) = times16(_mm512_shuffle_epi8(slot, high));
            } else {
                *pair.w.get_unchecked_mut(u * per + j) = slot;
            }
        }
    }
    let gw = p.groups() * p.format.group_words();
    let (sa, sb) = (p.sb.as_ptr().add(tile * gw), p.sb.as_ptr().add((tile + 1) * gw));
    pair.sb.clear();
    for g in 0..p.groups() {
        pair.sb.push(pair_scale_bias(sa, sb, p.format, g));
    }
}

/// `tdpbsud` of group `g`'s bytes of tile A's rows at `xa` (stride
/// `stride`, `kg` bytes a group) and of the pair's weights (tile B) into C
/// tile `c` (0 to 3), through A and B tiles 4 and 6 for an even `c`, 5 and 7
/// for an odd one, so that the next group's loads need not wait for this
/// group's products.
#[inline(always)]
unsafe fn group_sums(xa: *const i8, (stride, kg, kc): (usize, usize, usize), w: &[__m512i], g: usize, c: usize) {
    macro_rules! tiles {
        ($c:literal, $a:literal, $b:literal) => {{
            asm!(concat!("tilezero tmm", $c), options(nostack, nomem));
            for e in (g * kg..(g + 1) * kg).step_by(kc) {
                asm!(
                    concat!("tileloadd tmm", $a, ", [{x} + {stride} * 1]"),
                    concat!("tileloadd tmm", $b, ", [{w} + {row} * 1]"),
                    concat!("tdpbsud tmm", $c, ", tmm", $a, ", tmm", $b),
                    x = in(reg) xa.add(e),
                    stride = in(reg) stride,
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

/// Rows `m0..` of tiles `tile` and `tile + 1`, their tile A bytes at `xa`
/// (`chunk_rows`): a whole block (`FULL`), or the `m - m0` rows left.
///
/// Group `g + LEAD`'s products (tile C taken four in turn, A and B two in
/// turn) are issued before group `g`'s float steps, so that the tiles and
/// the vector units work at once, and the sums between them stay in L1.
/// The float steps: row `r`'s `isum` (C row `r` where `JOINED`; otherwise C
/// row `2 r` its `q . hi` and `2 r + 1` its `q . lo`, joined as the other
/// paths join them), then `add_group`'s, in its order, on sixteen lanes.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const FULL: bool, const JOINED: bool>(
    p: &Packed,
    m0: usize,
    tile: usize,
    xa: *const i8,
    pair: &Pair,
    ring: &mut [Sums; RING],
    out: OutPtr,
    ahead: Option<Range<usize>>,
) {
    let groups = p.groups();
    let rows = if FULL { block_rows(JOINED) } else { p.m - m0 };
    let kg = per_weight(JOINED) * p.group_size;
    let shape = (per_weight(JOINED) * p.k, kg, kg.min(64));
    let shift = _mm512_set1_epi32(lo_shift(p.bits) as i32);
    let mut acc = [_mm512_setzero_ps(); block_rows(true)];
    let product = |g: usize, ring: &mut [Sums; RING]| {
        group_sums(xa, shape, &pair.w, g, g % RING);
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
        let step = |r: usize, acc: &mut __m512| {
            let isum = if JOINED {
                _mm512_load_si512(c.as_ptr().add(16 * r).cast())
            } else {
                let h = _mm512_load_si512(c.as_ptr().add(32 * r).cast());
                let l = _mm512_load_si512(c.as_ptr().add(32 * r + 16).cast());
                _mm512_add_epi32(_mm512_sllv_epi32(h, shift), l)
            };
            let at = (m0 + r) * groups + g;
            let (d, xsum) = (*p.xd.get_unchecked(at), *p.xsum.get_unchecked(at));
            let t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scale, _mm512_set1_ps(d)));
            *acc = _mm512_add_ps(*acc, t);
            *acc = _mm512_add_ps(*acc, _mm512_mul_ps(bias, _mm512_set1_ps(xsum)));
        };
        // A whole block's rows spelled out, so that their sums stay in registers (a loop over
        // sixteen kept them on the stack).
        macro_rules! each {
            ($($r:literal)*) => {{ $( if $r < block_rows(JOINED) { step($r, &mut acc[$r]); } )* }};
        }
        match FULL {
            true => each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15),
            false => acc.iter_mut().enumerate().take(rows).for_each(|(r, a)| step(r, a)),
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
