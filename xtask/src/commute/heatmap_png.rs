//! The heat maps as PNG (docs/commute.md, "Reading the output"): the same cells, colours and
//! labels as the SVG (`pipeline::heat_map_of`), drawn into a pixel buffer with a built-in 3×5
//! font and written with the `png` crate, so a viewer without SVG support (or a fresh machine
//! without a converter) can show them. Drawn from the same `(call A, call B, commuting,
//! conflict-free)` cells as the SVG, never converted from it.

/// The colour of a cell: red (0% conflict-free) to green (100%), grey where the pair has no
/// commuting case in the run. The SVG uses the same function.
pub fn cell_colour(total: usize, free: usize) -> [u8; 3] {
    if total == 0 {
        return [220, 220, 220];
    }
    let f = free as f64 / total as f64;
    [((220.0 * (1.0 - f)) as u32 + 30) as u8, ((200.0 * f) as u32 + 30) as u8, 80]
}

/// A 3×5 glyph: five rows of three bits, top row first, leftmost pixel the high bit. Letters
/// have one case (the call names are lower case; the title's capitals draw the same).
fn glyph(c: char) -> u16 {
    let rows: [u8; 5] = match c.to_ascii_lowercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        'a' => [2, 5, 7, 5, 5],
        'b' => [6, 5, 6, 5, 6],
        'c' => [3, 4, 4, 4, 3],
        'd' => [6, 5, 5, 5, 6],
        'e' => [7, 4, 6, 4, 7],
        'f' => [7, 4, 6, 4, 4],
        'g' => [3, 4, 5, 5, 3],
        'h' => [5, 5, 7, 5, 5],
        'i' => [7, 2, 2, 2, 7],
        'j' => [1, 1, 1, 5, 2],
        'k' => [5, 5, 6, 5, 5],
        'l' => [4, 4, 4, 4, 7],
        'm' => [5, 7, 7, 5, 5],
        'n' => [6, 5, 5, 5, 5],
        'o' => [2, 5, 5, 5, 2],
        'p' => [6, 5, 6, 4, 4],
        'q' => [2, 5, 5, 6, 3],
        'r' => [6, 5, 6, 5, 5],
        's' => [3, 4, 2, 1, 6],
        't' => [7, 2, 2, 2, 2],
        'u' => [5, 5, 5, 5, 7],
        'v' => [5, 5, 5, 5, 2],
        'w' => [5, 5, 7, 7, 5],
        'x' => [5, 5, 2, 5, 5],
        'y' => [5, 5, 2, 2, 2],
        'z' => [7, 1, 2, 4, 7],
        '_' => [0, 0, 0, 0, 7],
        '/' => [1, 1, 2, 4, 4],
        '-' => [0, 0, 7, 0, 0],
        '(' => [2, 4, 4, 4, 2],
        ')' => [2, 1, 1, 1, 2],
        ',' => [0, 0, 0, 2, 4],
        '.' => [0, 0, 0, 0, 2],
        ':' => [0, 2, 0, 2, 0],
        '%' => [5, 1, 2, 4, 5],
        '×' => [0, 5, 2, 5, 0],
        _ => [0, 0, 0, 0, 0],
    };
    rows.iter().fold(0u16, |acc, r| (acc << 3) | *r as u16)
}

/// An RGB picture.
struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Canvas {
        Canvas { w, h, px: vec![255; w * h * 3] }
    }
    /// Pixels outside the picture are dropped (a title longer than the map is cut).
    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.w && y < self.h {
            let i = (y * self.w + x) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }
    fn fill(&mut self, x: usize, y: usize, w: usize, h: usize, c: [u8; 3]) {
        for yy in y..y + h {
            for xx in x..x + w {
                self.set(xx, yy, c);
            }
        }
    }
    /// `text` at `scale`, left to right from (x, y) (its top left); `up`: turned a quarter to
    /// the left, reading bottom to top from (x, y) (its bottom left), as the SVG's column
    /// labels.
    fn text(&mut self, x: usize, y: usize, text: &str, scale: usize, up: bool, c: [u8; 3]) {
        for (k, ch) in text.chars().enumerate() {
            let g = glyph(ch);
            for row in 0..5 {
                for col in 0..3 {
                    if g >> (14 - (row * 3 + col)) & 1 == 0 {
                        continue;
                    }
                    let along = k * 4 * scale + col * scale;
                    for dy in 0..scale {
                        for dx in 0..scale {
                            if up {
                                // Glyph column → up the picture, glyph row → right.
                                if let Some(py) = (y + dy).checked_sub(along + 1) {
                                    self.set(x + row * scale + dx, py, c);
                                }
                            } else {
                                self.set(x + along + dx, y + row * scale + dy, c);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The size of a cell in pixels (as the SVG's).
pub const CELL: usize = 28;
/// The scale of the call names (3×5 glyphs at 2: 8 pixels a character).
const NAME_SCALE: usize = 2;

/// Where the grid starts: (left, top) margins for names of `longest` characters.
pub fn grid_origin(longest: usize) -> (usize, usize) {
    let room = longest * 4 * NAME_SCALE + 8;
    (room, room + 20)
}

/// The PNG of a heat map of `names` × `names` from `pairs` (as `pipeline::heat_map_of`: call A,
/// call B, commuting, conflict-free; symmetric). Cell (i, j) is at
/// `grid_origin + (j * CELL, i * CELL)`.
pub fn heat_map_png(names: &[&str], pairs: &[(&str, &str, usize, usize)], title: &str) -> Result<Vec<u8>, String> {
    let n = names.len();
    let mut cell = std::collections::BTreeMap::new();
    for &(a, b, total, free) in pairs {
        let (i, j) = (names.iter().position(|x| *x == a).unwrap_or(0), names.iter().position(|x| *x == b).unwrap_or(0));
        cell.insert((i, j), (total, free));
        cell.insert((j, i), (total, free));
    }
    let longest = names.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    let (left, top) = grid_origin(longest);
    let (w, h) = (left + n * CELL + 10, top + n * CELL + 10);
    let mut c = Canvas::new(w, h);
    let black = [0, 0, 0];
    c.text(6, 6, title, 1, false, black);
    for (i, name) in names.iter().enumerate() {
        let len = name.chars().count() * 4 * NAME_SCALE;
        c.text(left - 4 - len, top + i * CELL + (CELL - 5 * NAME_SCALE) / 2, name, NAME_SCALE, false, black);
        c.text(left + i * CELL + (CELL - 5 * NAME_SCALE) / 2, top - 4, name, NAME_SCALE, true, black);
    }
    for i in 0..n {
        for j in 0..n {
            let (x, y) = (left + j * CELL, top + i * CELL);
            let (total, free) = cell.get(&(i, j)).copied().unwrap_or((0, 0));
            // One white pixel between cells, as the SVG's white stroke.
            c.fill(x, y, CELL, CELL, [255, 255, 255]);
            c.fill(x + 1, y + 1, CELL - 2, CELL - 2, cell_colour(total, free));
            if total > 0 {
                let label = format!("{free}/{total}");
                let lw = label.len() * 4 - 1;
                c.text(x + CELL.saturating_sub(lw) / 2, y + (CELL - 5) / 2, &label, 1, false, [255, 255, 255]);
            }
        }
    }
    let mut out = Vec::new();
    {
        let mut enc = ::png::Encoder::new(&mut out, w as u32, h as u32);
        enc.set_color(::png::ColorType::Rgb);
        enc.set_depth(::png::BitDepth::Eight);
        let mut wr = enc.write_header().map_err(|e| format!("png: {e}"))?;
        wr.write_image_data(&c.px).map_err(|e| format!("png: {e}"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = ::png::Decoder::new(std::io::Cursor::new(bytes));
        let mut r = dec.read_info().expect("a PNG header");
        let mut buf = vec![0; r.output_buffer_size().expect("size")];
        let info = r.next_frame(&mut buf).expect("a frame");
        assert_eq!((info.color_type, info.bit_depth), (::png::ColorType::Rgb, ::png::BitDepth::Eight));
        (info.width, info.height, buf[..info.buffer_size()].to_vec())
    }

    fn pixel(buf: &[u8], w: u32, x: usize, y: usize) -> [u8; 3] {
        let i = (y * w as usize + x) * 3;
        [buf[i], buf[i + 1], buf[i + 2]]
    }

    // Catches a PNG that does not decode, has the wrong size, or whose cells do not follow
    // the data: `a × b` with 1 of 2 conflict-free is half red, half green in both halves of
    // the map; `b × b` with 3 of 3 is green; `a × a` (no case) grey; changing the data
    // changes the pixel.
    #[test]
    fn png_decodes_with_cells_from_the_data() {
        let names = ["a", "bb", "ccc"];
        let pairs = [("a", "bb", 2, 1), ("bb", "bb", 3, 3)];
        let bytes = heat_map_png(&names, &pairs, "Test map (ours)").unwrap();
        let (w, h, buf) = decode(&bytes);
        let (left, top) = grid_origin(3);
        assert_eq!((w as usize, h as usize), (left + 3 * CELL + 10, top + 3 * CELL + 10));
        // A pixel inside a cell away from its label.
        let at = |i: usize, j: usize| pixel(&buf, w, left + j * CELL + 2, top + i * CELL + 2);
        assert_eq!(at(0, 1), [140, 130, 80], "a × bb: 1/2");
        assert_eq!(at(1, 0), [140, 130, 80], "drawn in both halves");
        assert_eq!(at(1, 1), [30, 230, 80], "bb × bb: 3/3");
        assert_eq!(at(0, 0), [220, 220, 220], "a × a: no case");
        assert_eq!(at(2, 2), [220, 220, 220]);
        // The label is drawn (white pixels in the middle of a cell with cases).
        let mid = (0..CELL).any(|dx| pixel(&buf, w, left + CELL + dx, top + CELL / 2) == [255, 255, 255]);
        assert!(mid, "a label in a × bb");
        let (_, _, buf2) = decode(&heat_map_png(&names, &[("a", "bb", 2, 0)], "Test map (ours)").unwrap());
        assert_eq!(pixel(&buf2, w, left + CELL + 2, top + 2), [250, 30, 80], "a × bb: 0/2 is red");
    }

    // Catches a glyph table with a missing character among those the maps' names use.
    #[test]
    fn every_call_name_has_glyphs() {
        for n in testdefs::commute_cases::CALLS.iter().map(|c| c.name).chain(testdefs::posix_cases::CALLS.iter().map(|c| c.name)) {
            for ch in n.chars() {
                assert_ne!(glyph(ch), 0, "`{ch}` of {n}");
            }
        }
    }
}
