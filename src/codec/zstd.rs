//! The one wrapper over libzstd (`zstd-sys`, C): a read pass compressed
//! into one frame, and untrusted frames decompressed with an output cap.
//! Its FFI calls are the only unsafe code of the folder.
//!
//! libzstd is built with its fast and dfast block compressors only
//! (.cargo/config.toml): levels 1-4 are libzstd's own, higher levels fall
//! back to dfast with their own window and table sizes.

use core::ffi::c_void;
use zstd_sys as sys;

/// The window a frame may ask of the decoder (2^24 = 16 MiB): every frame
/// of ours (a read pass whose size is in its header), and streams of any
/// level up to 19. A frame asking for more is refused, not allocated.
pub const MAX_WINDOW_LOG: i32 = 24;
/// Output added per decoder call.
const STEP: usize = 128 << 10;

#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// The frame would decompress past the caller's cap.
    TooBig,
    /// Not a zstd frame, truncated, corrupt, or asking for a window above
    /// [`MAX_WINDOW_LOG`].
    Malformed,
}

fn is_error(code: usize) -> bool {
    // SAFETY: a pure function of its integer argument.
    unsafe { sys::ZSTD_isError(code) != 0 }
}

/// `src` as one zstd frame (its size in the header). `level` as upstream's
/// `CompressionConfig.Zstd.level`: 0 is libzstd's default (3), levels
/// above the maximum are clamped by libzstd, negatives are its fast modes.
pub fn compress(src: &[u8], level: i32) -> Vec<u8> {
    // SAFETY: a new context, freed below; null only when out of memory.
    let cctx = unsafe { sys::ZSTD_createCCtx() };
    assert!(!cctx.is_null(), "zstd: out of memory");
    // SAFETY: pure.
    let bound = unsafe { sys::ZSTD_compressBound(src.len()) };
    let mut out = Vec::with_capacity(bound);
    // SAFETY: cctx is live. `out` has `bound` bytes of capacity, which
    // libzstd guarantees is enough, and it writes at most that many; `src`
    // is a live slice. The context is freed once, after its last use.
    // (The one-shot call, not ZSTD_compress2: the same frame and level
    // rules without the streaming and parameter code, 5 KB on aarch64.)
    let n = unsafe {
        let n = sys::ZSTD_compressCCtx(
            cctx,
            out.as_mut_ptr() as *mut c_void,
            bound,
            src.as_ptr() as *const c_void,
            src.len(),
            level,
        );
        sys::ZSTD_freeCCtx(cctx);
        n
    };
    assert!(!is_error(n), "zstd: compression into its bound failed");
    // SAFETY: libzstd wrote `n` <= `bound` bytes.
    unsafe { out.set_len(n) };
    out
}

/// Owns a decompression context.
struct DCtx(*mut sys::ZSTD_DCtx);

impl Drop for DCtx {
    fn drop(&mut self) {
        // SAFETY: created by ZSTD_createDCtx, freed once.
        unsafe { sys::ZSTD_freeDCtx(self.0) };
    }
}

/// The frames of `frame_untrusted` decompressed, refused past `limit`
/// bytes of output (the decoder's own memory is its window, at most
/// 2^[`MAX_WINDOW_LOG`], and a block). Several frames in a row are read as
/// one stream, as the zstd format allows.
pub fn decompress_with_limit(frame_untrusted: &[u8], limit: usize) -> Result<Vec<u8>, Error> {
    // SAFETY: a new context, owned by `ctx` from here on.
    let ctx = DCtx(unsafe { sys::ZSTD_createDCtx() });
    assert!(!ctx.0.is_null(), "zstd: out of memory");
    // SAFETY: ctx.0 is live.
    let r = unsafe {
        sys::ZSTD_DCtx_setParameter(
            ctx.0,
            sys::ZSTD_dParameter::ZSTD_d_windowLogMax,
            MAX_WINDOW_LOG,
        )
    };
    debug_assert!(!is_error(r));
    let mut out: Vec<u8> = Vec::new();
    let mut input = sys::ZSTD_inBuffer {
        src: frame_untrusted.as_ptr() as *const c_void,
        size: frame_untrusted.len(),
        pos: 0,
    };
    // What the last call said is left of its frame (0: at a frame's end).
    let mut pending = 1;
    while input.pos < input.size || pending != 0 {
        if out.len() > limit {
            return Err(Error::TooBig);
        }
        // One byte past the cap tells "too big" from "exactly the cap".
        let room = STEP.min(limit + 1 - out.len());
        out.reserve(room);
        let before = (input.pos, out.len());
        let mut output = sys::ZSTD_outBuffer {
            // SAFETY: within the allocation (len <= capacity).
            dst: unsafe { out.as_mut_ptr().add(out.len()) } as *mut c_void,
            size: room,
            pos: 0,
        };
        // SAFETY: ctx.0 is live; `input` describes the live slice with
        // pos <= size; `output` the `room` bytes of spare capacity just
        // reserved, of which libzstd writes output.pos.
        let r = unsafe { sys::ZSTD_decompressStream(ctx.0, &mut output, &mut input) };
        if is_error(r) {
            return Err(Error::Malformed);
        }
        // SAFETY: libzstd initialized output.pos <= room bytes after len.
        unsafe { out.set_len(out.len() + output.pos) };
        pending = r;
        // No progress either way: the input ended inside a frame.
        if (input.pos, out.len()) == before {
            return Err(Error::Malformed);
        }
    }
    if out.len() > limit {
        return Err(Error::TooBig);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn frames_round_trip_at_default_fast_high_and_clamped_levels() {
        let src = sample();
        for level in [0, 1, 3, 4, 9, 19, 22, 100, -5] {
            let z = compress(&src, level);
            assert!(z.len() < src.len() / 10, "level {level}: {}", z.len());
            assert_eq!(decompress_with_limit(&z, src.len()).unwrap(), src);
        }
        let empty = compress(&[], 3);
        assert_eq!(decompress_with_limit(&empty, 0).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn output_past_the_cap_is_refused_and_not_allocated() {
        // A bomb: 64 MiB of zeros in a few KB.
        let z = compress(&vec![0u8; 64 << 20], 1);
        assert!(z.len() < 64 << 10);
        assert_eq!(decompress_with_limit(&z, 1 << 20), Err(Error::TooBig));
        let src = sample();
        let z = compress(&src, 3);
        assert_eq!(decompress_with_limit(&z, src.len() - 1), Err(Error::TooBig));
    }

    #[test]
    fn garbage_truncation_and_huge_windows_are_malformed() {
        let z = compress(&sample(), 3);
        assert_eq!(
            decompress_with_limit(&z[..z.len() - 3], 64 << 20),
            Err(Error::Malformed)
        );
        assert_eq!(
            decompress_with_limit(b"not zstd", 64 << 20),
            Err(Error::Malformed)
        );
        // A frame header (magic, window descriptor 2^30, no content size)
        // asking for a window above MAX_WINDOW_LOG.
        let big_window = [
            0x28,
            0xb5,
            0x2f,
            0xfd,
            0x00,
            (30 - 10) << 3,
            0x01,
            0x00,
            0x00,
        ];
        assert_eq!(
            decompress_with_limit(&big_window, 64 << 20),
            Err(Error::Malformed)
        );
        // Two frames in a row are one stream.
        let mut two = compress(b"ab", 3);
        two.extend(compress(b"cd", 3));
        assert_eq!(decompress_with_limit(&two, 4).unwrap(), b"abcd");
    }
}
