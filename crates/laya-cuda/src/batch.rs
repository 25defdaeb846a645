//! How the rows of one pass become the engine's fixed-shape inputs: tokens packed back to
//! back and padded up to a token bucket, the read positions (position 0 and each marker of
//! each row) padded up to a selection bucket, and per-token metadata the kernels use in place
//! of masks. A bucket is what a CUDA graph is captured for, so a handful of graphs serve
//! every request size.
//!
//! Staging layout (4-byte words), for buckets `(t, s)`:
//! `ids[t] | key_start[t] | key_end[t] | pos[t] | qtype[t] | sel[s] | row_sel[s/2] |
//! row_nmark[s/2] | nrows[1] | tiles[t/64 + s/2]`.
//!
//! `tiles` lists the first token of each attention query tile: 64 consecutive tokens of one
//! row, counted from the row's start (unused entries −1). Tiles never straddle rows, so a
//! token's attention is computed the same way wherever its row sits in the pass.

use laya_core::engine::Row;

/// The padded sizes one pass runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    /// Token rows of every activation matrix.
    pub tokens: usize,
    /// Selected positions (position 0 and the markers of every row), even.
    pub selected: usize,
}

impl Bucket {
    /// The smallest bucket that holds `tokens` tokens and `selected` read positions. Tokens
    /// round up to 64 (up to 1,024), to 256 (up to 8,192), then to 1,024: the padding costs at
    /// most a few percent of the GEMM work where the work is large, and nothing measurable
    /// where it is small (weight reads dominate there). Read positions round up to a power of
    /// two from 16 to 256, then to 64: only the head's last layer reads them, a small part of
    /// a pass, and few classes let the warm-up capture every short bucket a load can meet (a
    /// bucket first met under traffic runs eagerly and is captured while its requests wait).
    pub fn for_sizes(tokens: usize, selected: usize) -> Bucket {
        let step = match tokens {
            0..=1024 => 64,
            1025..=8192 => 256,
            _ => 1024,
        };
        let selected = match selected {
            0..=16 => 16,
            17..=256 => selected.next_power_of_two(),
            _ => selected.div_ceil(64) * 64,
        };
        Bucket {
            tokens: tokens.max(1).div_ceil(step) * step,
            selected,
        }
    }

    /// Rows a pass in this bucket can hold: each row reads at least two positions.
    pub fn max_rows(&self) -> usize {
        self.selected / 2
    }

    /// Attention query tiles a pass can need: a row of `n` tokens takes `ceil(n / 64)`.
    pub fn max_tiles(&self) -> usize {
        self.tokens / 64 + self.max_rows()
    }

    /// Words of the staging layout.
    pub fn words(&self) -> usize {
        5 * self.tokens + self.selected + 2 * self.max_rows() + 1 + self.max_tiles()
    }

    /// Word offsets of each staged array.
    pub fn offsets(&self) -> Offsets {
        let t = self.tokens;
        let s = self.selected;
        Offsets {
            ids: 0,
            key_start: t,
            key_end: 2 * t,
            pos: 3 * t,
            qtype: 4 * t,
            sel: 5 * t,
            row_sel: 5 * t + s,
            row_nmark: 5 * t + s + s / 2,
            nrows: 5 * t + s + 2 * (s / 2),
            tiles: 5 * t + s + 2 * (s / 2) + 1,
        }
    }

    /// Output floats: one logit per selected position, then `n_act` act logits per row.
    pub fn outputs(&self, n_act: usize) -> usize {
        self.selected + self.max_rows() * n_act
    }
}

/// Word offsets into the staging layout (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub ids: usize,
    pub key_start: usize,
    pub key_end: usize,
    pub pos: usize,
    pub qtype: usize,
    pub sel: usize,
    pub row_sel: usize,
    pub row_nmark: usize,
    pub nrows: usize,
    pub tiles: usize,
}

/// Sizes of a pass before padding.
pub fn sizes(rows: &[Row]) -> (usize, usize) {
    let tokens = rows.iter().map(|r| r.ids.len()).sum();
    let selected = rows.iter().map(|r| 1 + r.markers.len()).sum();
    (tokens, selected)
}

/// Writes `rows` into `words` (at least `bucket.words()` long) in the staging layout.
/// Padding tokens are token 0 attending only to themselves at position 0; padding selections
/// read token 0. Rows must fit the bucket.
pub fn stage(rows: &[Row], bucket: Bucket, words: &mut [i32]) {
    let o = bucket.offsets();
    let (t, s) = (bucket.tokens, bucket.selected);
    let mut at = 0usize;
    let mut sat = 0usize;
    let mut tiles = 0usize;
    for (r, row) in rows.iter().enumerate() {
        let start = at;
        let end = at + row.ids.len();
        for q0 in (start..end).step_by(64) {
            words[o.tiles + tiles] = q0 as i32;
            tiles += 1;
        }
        for (p, &id) in row.ids.iter().enumerate() {
            let i = start + p;
            words[o.ids + i] = id as i32;
            words[o.key_start + i] = start as i32;
            words[o.key_end + i] = end as i32;
            words[o.pos + i] = p as i32;
            words[o.qtype + i] = row.qtype.index() as i32;
        }
        words[o.row_sel + r] = sat as i32;
        words[o.row_nmark + r] = row.markers.len() as i32;
        words[o.sel + sat] = start as i32;
        sat += 1;
        for &m in &row.markers {
            words[o.sel + sat] = (start + m) as i32;
            sat += 1;
        }
        at = end;
    }
    for i in at..t {
        words[o.ids + i] = 0;
        words[o.key_start + i] = i as i32;
        words[o.key_end + i] = i as i32 + 1;
        words[o.pos + i] = 0;
        words[o.qtype + i] = 0;
    }
    for j in sat..s {
        words[o.sel + j] = 0;
    }
    for r in rows.len()..bucket.max_rows() {
        words[o.row_sel + r] = 0;
        words[o.row_nmark + r] = 0;
    }
    words[o.nrows] = rows.len() as i32;
    for i in tiles..bucket.max_tiles() {
        words[o.tiles + i] = -1;
    }
}

/// Splits `rows` into consecutive passes of at most `max_tokens` tokens each (a longer row
/// runs alone).
pub fn passes(rows: &[Row], max_tokens: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut begin = 0;
    let mut tokens = 0;
    for (i, r) in rows.iter().enumerate() {
        if i > begin && tokens + r.ids.len() > max_tokens {
            out.push(begin..i);
            begin = i;
            tokens = 0;
        }
        tokens += r.ids.len();
    }
    if begin < rows.len() {
        out.push(begin..rows.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use laya_core::config::QType;

    fn row(len: usize, markers: &[usize], qtype: QType) -> Row {
        Row {
            ids: (0..len as u32).map(|i| 100 + i).collect(),
            markers: markers.to_vec(),
            qtype,
        }
    }

    #[test]
    fn buckets_round_up_by_size_class() {
        // ((tokens, read positions), (bucket tokens, bucket read positions))
        for ((tokens, selected), (t, s)) in [
            ((1, 1), (64, 16)),
            ((150, 3), (192, 16)),
            ((1024, 17), (1024, 32)),
            ((1025, 300), (1280, 320)),
            ((5900, 50), (6144, 64)),
            ((700, 65), (704, 128)),
            ((900, 256), (960, 256)),
            ((900, 257), (960, 320)),
            ((9000, 2), (9216, 16)),
        ] {
            assert_eq!(
                Bucket::for_sizes(tokens, selected),
                Bucket {
                    tokens: t,
                    selected: s
                },
                "{tokens} tokens, {selected} read positions"
            );
        }
    }

    #[test]
    fn staging_packs_rows_and_pads_the_rest() {
        let rows = [row(5, &[1, 2], QType::Choice), row(3, &[1], QType::Noul)];
        let b = Bucket::for_sizes(8, 5);
        let mut w = vec![-7; b.words()];
        stage(&rows, b, &mut w);
        let o = b.offsets();
        assert_eq!(
            &w[o.ids..o.ids + 9],
            &[100, 101, 102, 103, 104, 100, 101, 102, 0]
        );
        assert_eq!(
            &w[o.key_start..o.key_start + 9],
            &[0, 0, 0, 0, 0, 5, 5, 5, 8]
        );
        assert_eq!(&w[o.key_end..o.key_end + 9], &[5, 5, 5, 5, 5, 8, 8, 8, 9]);
        assert_eq!(&w[o.pos..o.pos + 9], &[0, 1, 2, 3, 4, 0, 1, 2, 0]);
        assert_eq!(&w[o.qtype..o.qtype + 9], &[0, 0, 0, 0, 0, 2, 2, 2, 0]);
        assert_eq!(&w[o.sel..o.sel + 6], &[0, 1, 2, 5, 6, 0]);
        assert_eq!(&w[o.row_sel..o.row_sel + 3], &[0, 3, 0]);
        assert_eq!(&w[o.row_nmark..o.row_nmark + 3], &[2, 1, 0]);
        assert_eq!(w[o.nrows], 2);
        assert_eq!(&w[o.tiles..o.tiles + 3], &[0, 5, -1]);
        assert_eq!(o.tiles + b.max_tiles(), b.words());
        assert!(!w.contains(&-7), "every word is written");
    }

    #[test]
    fn query_tiles_start_at_each_row_and_every_64_tokens() {
        let rows = [
            row(130, &[1], QType::Choice),
            row(64, &[1], QType::Choice),
            row(1, &[0], QType::Score),
        ];
        let b = Bucket::for_sizes(195, 6);
        let mut w = vec![0; b.words()];
        stage(&rows, b, &mut w);
        let o = b.offsets();
        let tiles: Vec<i32> = w[o.tiles..o.tiles + b.max_tiles()].to_vec();
        assert_eq!(&tiles[..6], &[0, 64, 128, 130, 194, -1]);
        assert!(tiles[5..].iter().all(|&t| t == -1));
    }

    #[test]
    fn passes_split_at_the_token_budget() {
        let rows = [
            row(600, &[1], QType::Choice),
            row(600, &[1], QType::Choice),
            row(2000, &[1], QType::Choice),
            row(10, &[1], QType::Choice),
        ];
        assert_eq!(passes(&rows, 1500), vec![0..2, 2..3, 3..4]);
        assert_eq!(passes(&rows, 10_000), vec![0..4]);
        assert!(passes(&[], 10).is_empty());
    }
}
