//! The floor under the index's tokenising: one core cutting a corpus into normalised words
//! (`scan`), and also looking each word up in the vocabulary (`find`), with no counting.
//! Used to judge how far the index kernel can go (benches/RESULTS.md).
//!
//! The input is the notes' texts joined by NUL bytes, e.g. from a suite corpus:
//!
//! ```text
//! python -c "import pyarrow.parquet as pq; from phisieve.io.sources import parquet_files; \
//!   t = pq.read_table(parquet_files('DOCS'), columns=['text']); \
//!   open('/tmp/texts.bin', 'wb').write(b'\0'.join(s.encode() for s in t['text'].to_pylist()))"
//! cargo run --release -p phisieve-core --example tokenize_floor -- /tmp/texts.bin
//! ```
use phisieve_core::normalize::{for_each_term, Normalizer};
use phisieve_core::vocab::Vocab;
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: tokenize_floor TEXTS (NUL-separated)");
    let data = std::fs::read_to_string(path).expect("a readable UTF-8 file");
    let docs: Vec<&str> = data.split('\0').collect();
    let norm = Normalizer::default();
    let mut buf = String::new();
    let mut vocab = Vocab::default();
    for d in &docs {
        for_each_term(d, &norm, &mut buf, |t| {
            vocab.intern(t);
        });
    }
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0u64;
        for d in &docs {
            for_each_term(d, &norm, &mut buf, |_| n += 1);
        }
        let scan = t.elapsed();
        let t = Instant::now();
        let mut ids = 0u64;
        for d in &docs {
            for_each_term(d, &norm, &mut buf, |t| {
                ids += u64::from(vocab.find(t).expect("interned"));
            });
        }
        let find = t.elapsed();
        println!(
            "{} bytes, {n} words ({} distinct): scan {:.1} ms, scan + find {:.1} ms (checksum {ids})",
            data.len(),
            vocab.len(),
            scan.as_secs_f64() * 1e3,
            find.as_secs_f64() * 1e3
        );
    }
}
