//! Avro object container files (the Avro specification's "Object Container Files"): the header
//! (magic `Obj\x01`, the metadata map with `avro.schema` and `avro.codec`, a 16-byte sync
//! marker) and blocks of records (a count, a byte size, the records' binary encoding, possibly
//! compressed, and the sync marker again). Read block by block, so a reader can say where it
//! is by (block offset, records of the block read) and start there again.
//!
//! Codecs: `null`, `deflate` (raw deflate), `snappy` (with its CRC-32 of the uncompressed
//! data) and `zstandard`, all in pure Rust; `bzip2` and `xz` are refused by name.

use std::io::{self, Read};

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::ResolvedSchema;
use apache_avro::Schema;

use super::json;

const MAGIC: &[u8; 4] = b"Obj\x01";

/// A block's byte size beyond this is refused (a damaged length, not a block).
const MAX_BLOCK_BYTES: u64 = 256 << 20;

/// How a container's blocks are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Null,
    Deflate,
    Snappy,
    Zstandard,
}

impl Codec {
    fn named(name: &str) -> Result<Codec, String> {
        Ok(match name {
            "null" | "" => Codec::Null,
            "deflate" => Codec::Deflate,
            "snappy" => Codec::Snappy,
            "zstandard" => Codec::Zstandard,
            other => {
                return Err(format!(
                    "codec {other:?} is not one of null, deflate, snappy, zstandard"
                ))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Codec::Null => "null",
            Codec::Deflate => "deflate",
            Codec::Snappy => "snappy",
            Codec::Zstandard => "zstandard",
        }
    }

    fn compress(self, data: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Codec::Null => Ok(data.to_vec()),
            Codec::Deflate => {
                use std::io::Write;
                let mut e =
                    flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).map_err(|e| e.to_string())?;
                e.finish().map_err(|e| e.to_string())
            }
            Codec::Snappy => {
                let mut out = snap::raw::Encoder::new()
                    .compress_vec(data)
                    .map_err(|e| e.to_string())?;
                out.extend_from_slice(&crc32fast::hash(data).to_be_bytes());
                Ok(out)
            }
            Codec::Zstandard => Ok(ruzstd::encoding::compress_to_vec(
                data,
                ruzstd::encoding::CompressionLevel::Fastest,
            )),
        }
    }
}

/// Writes container files of one schema: the header, each record's encoding from JSON, and
/// blocks of them.
#[derive(Debug)]
pub(crate) struct ContainerWriter {
    schema: Schema,
    text: String,
    codec: Codec,
    sync: [u8; 16],
}

impl ContainerWriter {
    /// A writer of `schema` (its text), blocks compressed with `codec`, `sync` the marker.
    ///
    /// # Errors
    /// The schema does not parse or resolve, or the codec is not one of null, deflate, snappy,
    /// zstandard.
    pub(crate) fn new(
        schema: &str,
        codec: &str,
        sync: [u8; 16],
    ) -> Result<ContainerWriter, String> {
        let codec = Codec::named(codec)?;
        let parsed =
            Schema::parse_str(schema).map_err(|e| format!("the schema does not parse: {e}"))?;
        ResolvedSchema::try_from(&parsed)
            .map_err(|e| format!("the schema does not resolve: {e}"))?;
        Ok(ContainerWriter {
            text: parsed.canonical_form(),
            schema: parsed,
            codec,
            sync,
        })
    }

    /// The file's header: magic, `avro.schema` and `avro.codec`, the sync marker.
    pub(crate) fn header(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        write_long(&mut out, 2);
        write_bytes(&mut out, b"avro.schema");
        write_bytes(&mut out, self.text.as_bytes());
        write_bytes(&mut out, b"avro.codec");
        write_bytes(&mut out, self.codec.name().as_bytes());
        write_long(&mut out, 0);
        out.extend_from_slice(&self.sync);
        out
    }

    /// The binary encoding of one record given as JSON (plain JSON as the engine's pipelines
    /// hold Avro records, or the Avro JSON encoding), appended to `out`.
    ///
    /// # Errors
    /// Not JSON, or not a value of the schema: the message names the path.
    pub(crate) fn datum(&self, json: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let value: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!("the output is not JSON ({e})"))?;
        let resolved = ResolvedSchema::try_from(&self.schema).map_err(|e| e.to_string())?;
        let avro = json::from_json(&value, &self.schema, resolved.get_names())?;
        let bytes = apache_avro::writer::datum::GenericDatumWriter::builder(&self.schema)
            .resolved_schemata(resolved)
            .build()
            .and_then(|w| w.write_value_to_vec(avro))
            .map_err(|e| e.to_string())?;
        out.extend_from_slice(&bytes);
        Ok(())
    }

    /// A block of `count` records whose encodings are `data`, compressed, with the marker.
    ///
    /// # Errors
    /// The codec failed.
    pub(crate) fn block(&self, count: u64, data: &[u8]) -> Result<Vec<u8>, String> {
        let data = self.codec.compress(data)?;
        let mut out = Vec::with_capacity(data.len() + 36);
        write_long(&mut out, i64::try_from(count).unwrap_or(i64::MAX));
        write_long(&mut out, i64::try_from(data.len()).unwrap_or(i64::MAX));
        out.extend_from_slice(&data);
        out.extend_from_slice(&self.sync);
        Ok(out)
    }
}

/// An Avro `long`, zig-zag and variable length.
fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Avro `bytes`: the length, then the bytes.
fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, i64::try_from(b.len()).unwrap_or(i64::MAX));
    out.extend_from_slice(b);
}

/// A container file's header: its writer schema, codec and sync marker.
#[derive(Debug)]
pub(crate) struct Container {
    schema: Schema,
    codec: Codec,
    sync: [u8; 16],
    /// The header's length in bytes: where the first block starts.
    pub(crate) header_len: u64,
}

/// One block read: its records' count and their (decompressed) encoding.
#[derive(Debug)]
pub(crate) struct Block {
    /// How many records it holds.
    pub(crate) count: u64,
    data: Vec<u8>,
    /// Its length in the file, sync marker included.
    pub(crate) len: u64,
}

impl Container {
    /// Reads the header from the start of a file.
    ///
    /// # Errors
    /// Not a container file, a damaged header, an unknown codec or a schema that does not
    /// parse: one line saying which.
    pub(crate) fn read_header(r: &mut impl Read) -> Result<Container, String> {
        let mut counted = Counted { inner: r, read: 0 };
        let mut magic = [0u8; 4];
        counted.read_exact(&mut magic).map_err(|_| {
            "not an Avro container file: it is shorter than the magic bytes".to_owned()
        })?;
        if &magic != MAGIC {
            return Err(
                "not an Avro container file (it does not start with Obj\\x01): write it with an Avro library's DataFileWriter, or read it with another format".into(),
            );
        }
        let mut schema = None;
        let mut codec = Codec::Null;
        loop {
            let mut count = read_long(&mut counted).map_err(|e| header(e.to_string()))?;
            if count == 0 {
                break;
            }
            if count < 0 {
                count = count
                    .checked_neg()
                    .ok_or_else(|| header("a negative map count".into()))?;
                read_long(&mut counted).map_err(|e| header(e.to_string()))?;
            }
            for _ in 0..count {
                let key = read_bytes(&mut counted).map_err(header)?;
                let value = read_bytes(&mut counted).map_err(header)?;
                match key.as_slice() {
                    b"avro.schema" => {
                        let text = String::from_utf8(value)
                            .map_err(|_| header("avro.schema is not UTF-8".into()))?;
                        schema = Some(Schema::parse_str(&text).map_err(|e| {
                            format!("the file's schema (avro.schema) does not parse: {e}")
                        })?);
                    }
                    b"avro.codec" => {
                        codec = Codec::named(&String::from_utf8_lossy(&value)).map_err(|m| {
                            format!(
                                "the file's {m}: write it with null, deflate, snappy or zstandard"
                            )
                        })?;
                    }
                    _ => {}
                }
            }
        }
        let mut sync = [0u8; 16];
        counted
            .read_exact(&mut sync)
            .map_err(|_| header("it ends before the sync marker".into()))?;
        let schema = schema.ok_or_else(|| header("it holds no avro.schema".into()))?;
        Ok(Container {
            schema,
            codec,
            sync,
            header_len: counted.read,
        })
    }

    /// Reads the next block; `None` at the file's end.
    ///
    /// # Errors
    /// A damaged block (its length, its sync marker) or data its codec cannot decompress.
    pub(crate) fn read_block(&self, r: &mut impl Read) -> Result<Option<Block>, String> {
        let mut counted = Counted { inner: r, read: 0 };
        let count = match read_long(&mut counted) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && counted.read == 0 => {
                return Ok(None)
            }
            Err(e) => return Err(format!("a block's record count cannot be read: {e}")),
        };
        let size = read_long(&mut counted)
            .map_err(|e| format!("a block's byte size cannot be read: {e}"))?;
        let (Ok(count), Ok(size)) = (u64::try_from(count), u64::try_from(size)) else {
            return Err(format!(
                "a block says it holds {count} records in {size} bytes: the file is damaged"
            ));
        };
        if size > MAX_BLOCK_BYTES {
            return Err(format!(
                "a block says it is {size} bytes, beyond {MAX_BLOCK_BYTES}: the file is damaged"
            ));
        }
        let mut raw = vec![0u8; size as usize];
        counted
            .read_exact(&mut raw)
            .map_err(|_| "the file ends inside a block: it was cut short".to_owned())?;
        let mut sync = [0u8; 16];
        counted.read_exact(&mut sync).map_err(|_| {
            "the file ends before a block's sync marker: it was cut short".to_owned()
        })?;
        if sync != self.sync {
            return Err("a block's sync marker differs from the header's: the file is damaged (or the position is not a block's start)".into());
        }
        Ok(Some(Block {
            count,
            data: self.decompress(raw)?,
            len: counted.read,
        }))
    }

    fn decompress(&self, raw: Vec<u8>) -> Result<Vec<u8>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("a block does not decompress: {e}");
        match self.codec {
            Codec::Null => Ok(raw),
            Codec::Deflate => {
                let mut out = Vec::new();
                flate2::read::DeflateDecoder::new(raw.as_slice())
                    .read_to_end(&mut out)
                    .map_err(|e| failed(&e))?;
                Ok(out)
            }
            Codec::Snappy => {
                let Some(split) = raw.len().checked_sub(4) else {
                    return Err(failed(&"shorter than its checksum"));
                };
                let out = snap::raw::Decoder::new()
                    .decompress_vec(&raw[..split])
                    .map_err(|e| failed(&e))?;
                let want = u32::from_be_bytes([
                    raw[split],
                    raw[split + 1],
                    raw[split + 2],
                    raw[split + 3],
                ]);
                if crc32fast::hash(&out) != want {
                    return Err(failed(&"its CRC-32 does not match"));
                }
                Ok(out)
            }
            Codec::Zstandard => {
                let mut out = Vec::new();
                ruzstd::decoding::StreamingDecoder::new(raw.as_slice())
                    .map_err(|e| failed(&e))?
                    .read_to_end(&mut out)
                    .map_err(|e| failed(&e))?;
                Ok(out)
            }
        }
    }

    /// The block's records as plain JSON text (a union's value without its branch, decimals
    /// as numbers, timestamps as numbers in their unit: as the engine reads Avro), in order.
    ///
    /// # Errors
    /// A record that does not decode with the file's schema, or bytes left over.
    pub(crate) fn records(&self, block: &Block) -> Result<Vec<String>, String> {
        let unresolved = |e: apache_avro::Error| format!("the file's schema does not resolve: {e}");
        let resolved = ResolvedSchema::try_from(&self.schema).map_err(unresolved)?;
        let reader = GenericDatumReader::builder(&self.schema)
            .resolved_writer_schemata(resolved.clone())
            .build()
            .map_err(unresolved)?;
        let mut at = block.data.as_slice();
        let mut out = Vec::with_capacity(usize::try_from(block.count).unwrap_or(0).min(1 << 16));
        for i in 0..block.count {
            let value = reader.read_value(&mut at).map_err(|e| {
                format!(
                    "record {} of its block does not decode with the file's schema: {e}",
                    i + 1
                )
            })?;
            let plain = json::to_plain_json(&value, &self.schema, resolved.get_names())?;
            out.push(plain.to_string());
        }
        if !at.is_empty() {
            return Err(format!(
                "a block holds {} bytes after its {} records: the file is damaged",
                at.len(),
                block.count
            ));
        }
        Ok(out)
    }
}

fn header(message: String) -> String {
    format!("the Avro container header is damaged: {message}")
}

/// Counts the bytes read through it.
struct Counted<'a, R> {
    inner: &'a mut R,
    read: u64,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// An Avro `long`: zig-zag, variable length.
fn read_long(r: &mut impl Read) -> io::Result<i64> {
    let mut value: u64 = 0;
    for shift in (0..70).step_by(7) {
        let mut byte = [0u8; 1];
        r.read_exact(&mut byte)?;
        value |= u64::from(byte[0] & 0x7f) << shift;
        if byte[0] & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "a long of more than 10 bytes",
    ))
}

/// Avro `bytes` (or a string's bytes): a length, then that many bytes.
fn read_bytes(r: &mut impl Read) -> Result<Vec<u8>, String> {
    let len = read_long(r).map_err(|e| e.to_string())?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= 1 << 20)
        .ok_or_else(|| format!("a metadata entry of {len} bytes"))?;
    let mut out = vec![0u8; len];
    r.read_exact(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Record;
    use apache_avro::{Codec as AvroCodec, Writer};

    const SCHEMA: &str = r#"{"type":"record","name":"Ride","fields":[
        {"name":"id","type":"long"},
        {"name":"zone","type":["null","string"],"default":null},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

    /// A container file of `n` records written by apache_avro's own writer, `per_block`
    /// records a block.
    fn file(n: i64, per_block: usize, codec: AvroCodec) -> Vec<u8> {
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let mut writer = Writer::with_codec(&schema, Vec::new(), codec).unwrap();
        for i in 0..n {
            let mut r = Record::new(&schema).unwrap();
            r.put("id", i);
            r.put(
                "zone",
                if i % 2 == 0 {
                    apache_avro::types::Value::Union(1, Box::new(format!("z{i}").into()))
                } else {
                    apache_avro::types::Value::Union(0, Box::new(apache_avro::types::Value::Null))
                },
            );
            r.put("at", apache_avro::types::Value::TimestampMillis(1000 * i));
            writer.append_value(r).unwrap();
            if (i as usize + 1).is_multiple_of(per_block) {
                writer.flush().unwrap();
            }
        }
        writer.into_inner().unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<String>, String> {
        let mut r = bytes;
        let c = Container::read_header(&mut r)?;
        assert_eq!(c.header_len as usize, bytes.len() - r.len());
        let mut out = Vec::new();
        while let Some(block) = c.read_block(&mut r)? {
            out.extend(c.records(&block)?);
        }
        Ok(out)
    }

    #[test]
    fn records_of_every_block_come_out_as_plain_json_in_order_for_each_codec() {
        for codec in [AvroCodec::Null, AvroCodec::Deflate(Default::default())] {
            let got = read_all(&file(25, 10, codec)).unwrap();
            assert_eq!(got.len(), 25, "{codec:?}");
            assert_eq!(got[0], r#"{"at":0,"id":0,"zone":"z0"}"#, "{codec:?}");
            assert_eq!(got[1], r#"{"at":1000,"id":1,"zone":null}"#, "{codec:?}");
        }
    }

    /// The records of a null-codec file written again, block by block, with `codec`.
    fn recompressed(null: &[u8], codec: &str, compress: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
        let mut r = null;
        let c = Container::read_header(&mut r).unwrap();
        let mut out = MAGIC.to_vec();
        write_long(&mut out, 2);
        write_bytes(&mut out, b"avro.schema");
        write_bytes(&mut out, SCHEMA.as_bytes());
        write_bytes(&mut out, b"avro.codec");
        write_bytes(&mut out, codec.as_bytes());
        write_long(&mut out, 0);
        out.extend_from_slice(&c.sync);
        while let Some(block) = c.read_block(&mut r).unwrap() {
            let data = compress(&block.data);
            write_long(&mut out, block.count as i64);
            write_long(&mut out, data.len() as i64);
            out.extend_from_slice(&data);
            out.extend_from_slice(&c.sync);
        }
        out
    }

    #[test]
    fn snappy_and_zstandard_blocks_read_as_the_same_records_and_bzip2_is_refused() {
        let null = file(25, 10, AvroCodec::Null);
        let want = read_all(&null).unwrap();
        let snappy = recompressed(&null, "snappy", |d| {
            let mut out = snap::raw::Encoder::new().compress_vec(d).unwrap();
            out.extend_from_slice(&crc32fast::hash(d).to_be_bytes());
            out
        });
        assert_eq!(read_all(&snappy).unwrap(), want);
        let zstd = recompressed(&null, "zstandard", |d| {
            ruzstd::encoding::compress_to_vec(d, ruzstd::encoding::CompressionLevel::Fastest)
        });
        assert_eq!(read_all(&zstd).unwrap(), want);
        let bad_crc = recompressed(&null, "snappy", |d| {
            let mut out = snap::raw::Encoder::new().compress_vec(d).unwrap();
            out.extend_from_slice(&(crc32fast::hash(d) ^ 1).to_be_bytes());
            out
        });
        assert_eq!(
            read_all(&bad_crc).unwrap_err(),
            "a block does not decompress: its CRC-32 does not match"
        );
        let bzip2 = recompressed(&null, "bzip2", |d| d.to_vec());
        assert_eq!(
            read_all(&bzip2).unwrap_err(),
            "the file's codec \"bzip2\" is not one of null, deflate, snappy, zstandard: write it with null, deflate, snappy or zstandard"
        );
    }

    /// What the writer writes, the reader reads back, for each codec; a record that does not
    /// fit the schema is named.
    #[test]
    fn written_files_read_back_record_for_record_with_every_codec() {
        let want = read_all(&file(25, 10, AvroCodec::Null)).unwrap();
        for codec in ["null", "deflate", "snappy", "zstandard"] {
            let w = ContainerWriter::new(SCHEMA, codec, [7; 16]).unwrap();
            let mut bytes = w.header();
            for chunk in want.chunks(10) {
                let mut data = Vec::new();
                for record in chunk {
                    w.datum(record.as_bytes(), &mut data).unwrap();
                }
                bytes.extend(w.block(chunk.len() as u64, &data).unwrap());
            }
            assert_eq!(read_all(&bytes).unwrap(), want, "{codec}");
        }
        let w = ContainerWriter::new(SCHEMA, "null", [7; 16]).unwrap();
        let e = w
            .datum(br#"{"id":"x","at":1}"#, &mut Vec::new())
            .unwrap_err();
        assert!(e.contains("id"), "{e}");
        assert_eq!(
            ContainerWriter::new(SCHEMA, "lzo", [7; 16]).unwrap_err(),
            "codec \"lzo\" is not one of null, deflate, snappy, zstandard"
        );
    }

    #[test]
    fn a_damaged_or_foreign_file_is_named_not_read_past() {
        let good = file(5, 5, AvroCodec::Null);
        assert!(read_all(b"id,at\n1,2\n")
            .unwrap_err()
            .starts_with("not an Avro container file"));
        let mut cut = good.clone();
        cut.truncate(good.len() - 3);
        assert_eq!(
            read_all(&cut).unwrap_err(),
            "the file ends before a block's sync marker: it was cut short"
        );
        let mut resynced = good.clone();
        let last = resynced.len() - 1;
        resynced[last] ^= 0xff;
        assert!(read_all(&resynced)
            .unwrap_err()
            .starts_with("a block's sync marker differs"));
        let mut r = good.as_slice();
        let c = Container::read_header(&mut r).unwrap();
        // From the middle of a block: not a block's start.
        let mut inside = &good[c.header_len as usize + 3..];
        assert!(c.read_block(&mut inside).is_err());
    }
}
