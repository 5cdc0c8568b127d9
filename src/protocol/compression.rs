//! Pure-Rust codecs for the compression types a v2 record batch can carry.
//!
//! Every decoder bounds the size of what it produces: a batch is at most a few MiB on the wire,
//! but a hostile or corrupt one can claim (or genuinely expand to) gigabytes. Decompression
//! refuses to produce more than a limit ([`DEFAULT_MAX_DECOMPRESSED_BYTES`] unless told
//! otherwise) and never sizes an allocation from a length field alone.
//!
//! Wire formats, chosen to interoperate with the Java client and librdkafka:
//! - gzip: RFC 1952 members (several concatenated members are accepted on decode).
//! - snappy: raw snappy on encode; on decode both raw snappy and the xerial framing written by
//!   the Java client (`0x82 "SNAPPY" 0x00`, two be-i32 versions, then be-u32-length chunks).
//! - lz4: the LZ4 frame format with 64 KiB independent blocks and no content checksum, the only
//!   shape every Kafka client decodes.
//! - zstd: standard frames (several frames and skippable frames are accepted on decode).

use std::fmt;
use std::io::{Read, Write};

/// The compression codec of a record batch (bits 0-2 of the batch attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// No compression (codec id 0).
    #[default]
    None,
    /// gzip (codec id 1).
    Gzip,
    /// snappy (codec id 2).
    Snappy,
    /// LZ4 frame format (codec id 3).
    Lz4,
    /// zstd (codec id 4).
    Zstd,
}

impl Compression {
    /// All codecs, in codec id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec with this id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), if it is one.
    pub fn from_id(id: i16) -> Option<Compression> {
        match id {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// The codec id as written in the batch attributes.
    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The name Kafka uses for this codec in `compression.type`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compression {
    type Err = CompressionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| CompressionError::UnknownCodec(s.to_owned()))
    }
}

/// Default bound on the output of one decompression: 256 MiB.
///
/// Brokers cap a batch at `message.max.bytes` (1 MiB by default, rarely above 100 MiB), so a
/// batch that expands beyond this is a decompression bomb or corrupt.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 256 << 20;

/// Why compressing or decompressing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressionError {
    /// Decompressing would produce more than the configured limit.
    #[error("{codec} data decompresses to more than the {limit}-byte limit")]
    TooLarge {
        /// The codec being decoded.
        codec: Compression,
        /// The limit in force.
        limit: usize,
    },
    /// The compressed input is malformed.
    #[error("corrupt {codec} data: {reason}")]
    Corrupt {
        /// The codec being decoded.
        codec: Compression,
        /// What is wrong, one line.
        reason: String,
    },
    /// The encoder failed.
    #[error("{codec} compression failed: {reason}")]
    Encode {
        /// The codec being encoded.
        codec: Compression,
        /// What went wrong, one line.
        reason: String,
    },
    /// A codec name that is not one of none, gzip, snappy, lz4, zstd.
    #[error("unknown compression type {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
    UnknownCodec(String),
}

fn corrupt(codec: Compression, reason: impl fmt::Display) -> CompressionError {
    CompressionError::Corrupt {
        codec,
        reason: one_line(reason),
    }
}

fn encode_err(codec: Compression, reason: impl fmt::Display) -> CompressionError {
    CompressionError::Encode {
        codec,
        reason: one_line(reason),
    }
}

/// Error messages from the codec crates occasionally span lines; ours promise one.
fn one_line(reason: impl fmt::Display) -> String {
    reason
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Compresses `input` with `codec`. [`Compression::None`] returns a copy.
pub fn compress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    compress_into(codec, input, &mut out)?;
    Ok(out)
}

/// Compresses `input` with `codec`, appending to `out` (so a caller can reserve room for a
/// header in front and avoid a copy).
pub fn compress_into(
    codec: Compression,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), CompressionError> {
    match codec {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => {
            // Level 6 is what the Java client and librdkafka use by default.
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::new(6));
            enc.write_all(input).map_err(|e| encode_err(codec, e))?;
            enc.finish().map_err(|e| encode_err(codec, e))?;
            Ok(())
        }
        Compression::Snappy => {
            let start = out.len();
            out.resize(start + snap::raw::max_compress_len(input.len()), 0);
            let n = snap::raw::Encoder::new()
                .compress(input, &mut out[start..])
                .map_err(|e| encode_err(codec, e));
            match n {
                Ok(n) => {
                    out.truncate(start + n);
                    Ok(())
                }
                Err(e) => {
                    out.truncate(start);
                    Err(e)
                }
            }
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            enc.write_all(input).map_err(|e| encode_err(codec, e))?;
            enc.finish().map_err(|e| encode_err(codec, e))?;
            Ok(())
        }
        Compression::Zstd => {
            // Fastest is the only ruzstd level that is implemented; the others panic.
            ruzstd::encoding::compress(input, out, ruzstd::encoding::CompressionLevel::Fastest);
            Ok(())
        }
    }
}

/// Decompresses `input` with `codec`, refusing output beyond [`DEFAULT_MAX_DECOMPRESSED_BYTES`].
pub fn decompress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, CompressionError> {
    decompress_with_limit(codec, input, DEFAULT_MAX_DECOMPRESSED_BYTES)
}

/// Decompresses `input` with `codec`, failing with [`CompressionError::TooLarge`] rather than
/// producing more than `limit` bytes.
pub fn decompress_with_limit(
    codec: Compression,
    input: &[u8],
    limit: usize,
) -> Result<Vec<u8>, CompressionError> {
    match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(CompressionError::TooLarge { codec, limit });
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => read_bounded(codec, flate2::read::MultiGzDecoder::new(input), limit),
        Compression::Snappy => snappy_decompress(input, limit),
        Compression::Lz4 => lz4_decompress(input, limit),
        Compression::Zstd => zstd_decompress(input, limit),
    }
}

/// Reads a streaming decoder to the end, stopping one byte past `limit` so that an oversized
/// stream is detected without ever holding more than `limit + 1` bytes of it.
fn read_bounded(
    codec: Compression,
    reader: impl Read,
    limit: usize,
) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(CompressionError::TooLarge { codec, limit });
    }
    Ok(out)
}

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// Magic, then be-i32 version and be-i32 minimum compatible version.
const XERIAL_HEADER_LEN: usize = 16;

fn snappy_decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    let codec = Compression::Snappy;
    if input.len() >= XERIAL_HEADER_LEN && input.starts_with(XERIAL_MAGIC) {
        let mut out = Vec::new();
        let mut rest = &input[XERIAL_HEADER_LEN..];
        while !rest.is_empty() {
            let Some((len_bytes, tail)) = rest.split_first_chunk::<4>() else {
                return Err(corrupt(codec, "xerial chunk length is truncated"));
            };
            let len = u32::from_be_bytes(*len_bytes) as usize;
            if len > tail.len() {
                return Err(corrupt(
                    codec,
                    format_args!(
                        "xerial chunk claims {len} bytes but only {} remain",
                        tail.len()
                    ),
                ));
            }
            let (chunk, tail) = tail.split_at(len);
            snappy_raw_into(chunk, limit.saturating_sub(out.len()), limit, &mut out)?;
            rest = tail;
        }
        Ok(out)
    } else {
        let mut out = Vec::new();
        snappy_raw_into(input, limit, limit, &mut out)?;
        Ok(out)
    }
}

/// Appends one raw snappy block to `out`, allowing at most `room` more bytes.
fn snappy_raw_into(
    input: &[u8],
    room: usize,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), CompressionError> {
    let codec = Compression::Snappy;
    let declared = snap::raw::decompress_len(input).map_err(|e| corrupt(codec, e))?;
    if declared > room {
        return Err(CompressionError::TooLarge { codec, limit });
    }
    // The densest snappy element is a 3-byte copy of 64 bytes, so a block can never expand by
    // more than ~21.4x. A declared length beyond that is a lie, and refusing it here keeps the
    // buffer below from being sized by an attacker.
    if declared > input.len().saturating_mul(22) {
        return Err(corrupt(
            codec,
            format_args!(
                "block of {} bytes claims an impossible {declared} decompressed bytes",
                input.len()
            ),
        ));
    }
    let start = out.len();
    out.resize(start + declared, 0);
    match snap::raw::Decoder::new().decompress(input, &mut out[start..]) {
        Ok(n) => {
            out.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(corrupt(codec, e))
        }
    }
}

const LZ4_MAGIC: u32 = 0x184D_2204;
/// Skippable frames share the zstd range: 0x184D2A50..=0x184D2A5F.
const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// Decodes an LZ4 stream frame by frame, walking the block headers first.
///
/// lz4_flex treats running out of input at a block boundary as a clean end of stream, so a
/// truncated payload would otherwise decode "successfully" to a prefix of the data; walking the
/// frame first proves it is complete. It also stops at skippable frames, which we skip.
fn lz4_decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    let codec = Compression::Lz4;
    let truncated = || corrupt(codec, "truncated frame");
    let le_u32 = |b: &[u8], at: usize| {
        b.get(at..at.saturating_add(4))
            .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
            .ok_or_else(truncated)
    };
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let magic = le_u32(rest, 0)?;
        if magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC {
            let end = 8usize.saturating_add(le_u32(rest, 4)? as usize);
            rest = rest.get(end..).ok_or_else(truncated)?;
        } else if magic == LZ4_MAGIC {
            let flg = *rest.get(4).ok_or_else(truncated)?;
            let block_checksums = flg & 0x10 != 0;
            let content_checksum = flg & 0x04 != 0;
            // magic, FLG, BD, optional content size and dictionary id, header checksum
            let mut pos =
                7 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
            loop {
                let size = le_u32(rest, pos)?;
                pos += 4;
                if size == 0 {
                    break;
                }
                pos = pos
                    .saturating_add((size & 0x7FFF_FFFF) as usize)
                    .saturating_add(if block_checksums { 4 } else { 0 });
            }
            let end = pos + if content_checksum { 4 } else { 0 };
            let frame = rest.get(..end).ok_or_else(truncated)?;
            let room = limit - out.len();
            let part = read_bounded(codec, lz4_flex::frame::FrameDecoder::new(frame), room)
                .map_err(|e| match e {
                    CompressionError::TooLarge { .. } => {
                        CompressionError::TooLarge { codec, limit }
                    }
                    e => e,
                })?;
            if out.is_empty() {
                out = part;
            } else {
                out.extend_from_slice(&part);
            }
            rest = &rest[end..];
        } else {
            return Err(corrupt(
                codec,
                format_args!("bad frame magic {magic:#010x}"),
            ));
        }
    }
    Ok(out)
}

const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// What the frame header says about memory, parsed before handing the frame to ruzstd.
struct ZstdFrameSizes {
    /// Bytes the decoder keeps as history; ruzstd buffers this much before releasing output.
    window: u64,
    /// The declared decompressed size, if the header has one.
    content: Option<u64>,
}

/// Parses the window and content size from a zstd frame header (RFC 8878 section 3.1.1.1).
fn zstd_frame_sizes(frame: &[u8]) -> Result<ZstdFrameSizes, CompressionError> {
    let codec = Compression::Zstd;
    let truncated = || corrupt(codec, "frame header is truncated");
    let descriptor = *frame.get(4).ok_or_else(truncated)?;
    let fcs_flag = descriptor >> 6;
    let single_segment = descriptor & 0x20 != 0;
    let dict_id_len = match descriptor & 0x03 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let mut pos = 5;
    let window_from_descriptor = if single_segment {
        None
    } else {
        let wd = *frame.get(pos).ok_or_else(truncated)?;
        pos += 1;
        let exponent = u32::from(wd >> 3);
        let mantissa = u64::from(wd & 0x07);
        let base = 1u64 << (10 + exponent);
        Some(base + (base / 8) * mantissa)
    };
    pos += dict_id_len;
    let fcs_len = match fcs_flag {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let fcs = frame.get(pos..pos + fcs_len).ok_or_else(truncated)?;
    let content = match fcs_len {
        0 => None,
        1 => Some(u64::from(fcs[0])),
        2 => Some(u64::from(u16::from_le_bytes([fcs[0], fcs[1]])) + 256),
        4 => Some(u64::from(u32::from_le_bytes([
            fcs[0], fcs[1], fcs[2], fcs[3],
        ]))),
        _ => Some(u64::from_le_bytes([
            fcs[0], fcs[1], fcs[2], fcs[3], fcs[4], fcs[5], fcs[6], fcs[7],
        ])),
    };
    let window = match (window_from_descriptor, content) {
        (Some(w), _) => w,
        (None, Some(c)) => c,
        (None, None) => return Err(truncated()),
    };
    Ok(ZstdFrameSizes { window, content })
}

/// Zstandard frames one after another (skippable frames skipped), into at most `limit` bytes.
fn zstd_decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    let codec = Compression::Zstd;
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let Some(magic) = rest.first_chunk::<4>().map(|m| u32::from_le_bytes(*m)) else {
            return Err(corrupt(codec, "trailing bytes after the last frame"));
        };
        if magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC {
            let len = rest
                .get(4..8)
                .map(|l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)
                .ok_or_else(|| corrupt(codec, "skippable frame header is truncated"))?;
            rest = rest
                .get(8..)
                .and_then(|r| r.get(len..))
                .ok_or_else(|| corrupt(codec, "skippable frame is truncated"))?;
            continue;
        }
        if magic != ZSTD_MAGIC {
            return Err(corrupt(
                codec,
                format_args!("bad frame magic {magic:#010x}"),
            ));
        }
        zstd_frame(&mut rest, &mut out, limit)?;
    }
    Ok(out)
}

/// One Zstandard frame at the start of `rest` (consumed) appended to `out`, which must stay
/// within `limit` bytes; its checksum and declared size, when it has them, checked.
fn zstd_frame(rest: &mut &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CompressionError> {
    use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

    let codec = Compression::Zstd;
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    let too_large = || CompressionError::TooLarge { codec, limit };
    // ruzstd holds a whole window of output before releasing any of it, and does not cap
    // the window of the first frame it decodes; checking the header first bounds that
    // buffer by the limit too.
    let sizes = zstd_frame_sizes(rest)?;
    let produced = out.len() as u64;
    if sizes.window > limit64
        || sizes
            .content
            .is_some_and(|c| c > limit64.saturating_sub(produced))
    {
        return Err(too_large());
    }

    let mut decoder = FrameDecoder::new();
    decoder.init(&mut *rest).map_err(|e| corrupt(codec, e))?;
    loop {
        // One block (at most 128 KiB of output) at a time, so the limit check below runs
        // before the buffered output can run away.
        decoder
            .decode_blocks(&mut *rest, BlockDecodingStrategy::UptoBlocks(1))
            .map_err(|e| corrupt(codec, e))?;
        decoder
            .collect_to_writer(&mut *out)
            .map_err(|e| corrupt(codec, e))?;
        if out.len() > limit {
            return Err(too_large());
        }
        if decoder.is_finished() {
            break;
        }
    }
    // Drain what is left once the frame is finished (collect_to_writer keeps a window's
    // worth while the frame is still in progress).
    decoder
        .collect_to_writer(&mut *out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(too_large());
    }
    if let (Some(expected), Some(actual)) = (
        decoder.get_checksum_from_data(),
        decoder.get_calculated_checksum(),
    ) {
        if expected != actual {
            return Err(corrupt(
                codec,
                format_args!("content checksum mismatch (frame says {expected:#010x}, data hashes to {actual:#010x})"),
            ));
        }
    }
    if let Some(content) = sizes.content {
        let got = out.len() as u64 - produced;
        if got != content {
            return Err(corrupt(
                codec,
                format_args!("frame declares {content} bytes but decodes to {got}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        // Compressible but not trivially so: a repeating text with a counter mixed in.
        let mut v = Vec::with_capacity(len);
        let mut i = 0u32;
        while v.len() < len {
            v.extend_from_slice(format!("record-{i:08} the quick brown fox; ").as_bytes());
            i = i.wrapping_add(7919);
        }
        v.truncate(len);
        v
    }

    #[test]
    fn round_trip_every_codec() {
        for codec in Compression::ALL {
            for len in [0usize, 1, 100, 65_535, 65_536, 65_537, 300_000] {
                let data = sample(len);
                let c = compress(codec, &data).unwrap();
                let d = decompress(codec, &c).unwrap();
                assert_eq!(d, data, "{codec} len {len}");
            }
        }
    }

    #[test]
    fn codec_ids_and_names() {
        for codec in Compression::ALL {
            assert_eq!(Compression::from_id(codec.id()), Some(codec));
            assert_eq!(codec.name().parse::<Compression>().unwrap(), codec);
        }
        assert_eq!(Compression::from_id(5), None);
        assert!("brotli".parse::<Compression>().is_err());
    }

    #[test]
    fn lz4_frame_uses_64k_independent_blocks_without_checksums() {
        let c = compress(Compression::Lz4, &sample(1000)).unwrap();
        assert_eq!(&c[..4], &[0x04, 0x22, 0x4D, 0x18]);
        // FLG: version 01, block independence set, no block/content checksum, no content size.
        assert_eq!(c[4], 0b0110_0000);
        // BD: block max size code 4 = 64 KiB.
        assert_eq!(c[5], 0x40);
    }

    #[test]
    fn lz4_frames_with_checksums_and_skippable_frames_decode() {
        let data = sample(150_000);
        let info = lz4_flex::frame::FrameInfo::new()
            .block_checksums(true)
            .content_checksum(true)
            .content_size(Some(data.len() as u64));
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(&data).unwrap();
        let mut input = SKIPPABLE_MAGIC.to_le_bytes().to_vec();
        input.extend_from_slice(&2u32.to_le_bytes());
        input.extend_from_slice(b"hi");
        input.extend_from_slice(&enc.finish().unwrap());
        input.extend_from_slice(&compress(Compression::Lz4, b"tail").unwrap());
        let mut expected = data;
        expected.extend_from_slice(b"tail");
        assert_eq!(decompress(Compression::Lz4, &input).unwrap(), expected);
        for cut in [input.len() - 1, input.len() - 4, input.len() - 8] {
            assert!(
                decompress(Compression::Lz4, &input[..cut]).is_err(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn snappy_encodes_raw_and_decodes_xerial() {
        let data = sample(200_000);
        let raw = compress(Compression::Snappy, &data).unwrap();
        assert!(!raw.starts_with(XERIAL_MAGIC));

        // What org.xerial.snappy.SnappyOutputStream writes: header, then 32 KiB chunks.
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&1i32.to_be_bytes());
        xerial.extend_from_slice(&1i32.to_be_bytes());
        for chunk in data.chunks(32 * 1024) {
            let c = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            xerial.extend_from_slice(&(c.len() as u32).to_be_bytes());
            xerial.extend_from_slice(&c);
        }
        assert_eq!(decompress(Compression::Snappy, &xerial).unwrap(), data);

        // A header with no chunks is an empty payload.
        assert!(decompress(Compression::Snappy, &xerial[..16])
            .unwrap()
            .is_empty());
        // A chunk length that runs past the end is corrupt, not a panic.
        let mut bad = xerial[..16].to_vec();
        bad.extend_from_slice(&1000u32.to_be_bytes());
        bad.extend_from_slice(&[0; 10]);
        assert!(matches!(
            decompress(Compression::Snappy, &bad),
            Err(CompressionError::Corrupt { .. })
        ));
    }

    #[test]
    fn bombs_are_refused_at_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        for codec in Compression::ALL {
            let c = compress(codec, &zeros).unwrap();
            let err = decompress_with_limit(codec, &c, 1 << 20).unwrap_err();
            assert_eq!(
                err,
                CompressionError::TooLarge {
                    codec,
                    limit: 1 << 20
                },
                "{codec}"
            );
            // Exactly at the limit is fine.
            assert_eq!(
                decompress_with_limit(codec, &c, zeros.len()).unwrap().len(),
                zeros.len()
            );
        }
    }

    #[test]
    fn snappy_lying_length_does_not_allocate() {
        // Varint 0xFFFFFFFF (4 GiB - 1) followed by nothing.
        let input = [0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
        assert!(matches!(
            decompress(Compression::Snappy, &input),
            Err(CompressionError::TooLarge { .. })
        ));
        // Below the limit but far beyond what 7 bytes can expand to.
        let input = [0x80, 0x80, 0x80, 0x40, 0, 0, 0];
        assert!(matches!(
            decompress(Compression::Snappy, &input),
            Err(CompressionError::Corrupt { .. })
        ));
    }

    #[test]
    fn zstd_huge_declared_sizes_are_refused_up_front() {
        // Single-segment frame declaring 2^62 bytes of content.
        let mut frame = ZSTD_MAGIC.to_le_bytes().to_vec();
        frame.push(0b1110_0000);
        frame.extend_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(matches!(
            decompress(Compression::Zstd, &frame),
            Err(CompressionError::TooLarge { .. })
        ));
        // Windowed frame with a 2 GiB window.
        let mut frame = ZSTD_MAGIC.to_le_bytes().to_vec();
        frame.push(0);
        frame.push(21 << 3);
        assert!(matches!(
            decompress(Compression::Zstd, &frame),
            Err(CompressionError::TooLarge { .. })
        ));
    }

    #[test]
    fn zstd_concatenated_and_skippable_frames() {
        let a = sample(1000);
        let b = sample(70_000);
        let mut input = compress(Compression::Zstd, &a).unwrap();
        input.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
        input.extend_from_slice(&3u32.to_le_bytes());
        input.extend_from_slice(b"xyz");
        input.extend_from_slice(&compress(Compression::Zstd, &b).unwrap());
        let mut expected = a;
        expected.extend_from_slice(&b);
        assert_eq!(decompress(Compression::Zstd, &input).unwrap(), expected);
    }

    #[test]
    fn garbage_is_an_error_for_every_codec() {
        let garbage = b"\x01\x02\x03 definitely not compressed \xff\xfe";
        for codec in Compression::ALL {
            if codec == Compression::None {
                continue;
            }
            let e = decompress(codec, garbage).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    #[test]
    fn truncated_streams_are_errors() {
        let data = sample(100_000);
        for codec in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let c = compress(codec, &data).unwrap();
            // len - 4 drops exactly the LZ4 end mark, which lz4_flex alone would not notice.
            for cut in [1, c.len() / 2, c.len() - 4, c.len() - 1] {
                assert!(
                    decompress(codec, &c[..cut]).is_err(),
                    "{codec} cut at {cut} of {}",
                    c.len()
                );
            }
        }
    }
}
