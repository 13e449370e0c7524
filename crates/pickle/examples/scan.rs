//! Prints the scan report of each file given on the command line.
fn main() {
    for a in std::env::args().skip(1) {
        match weightport_pickle::scan(std::path::Path::new(&a)) {
            Ok(r) => {
                println!(
                    "{a}: {:?}, {} tensors, format {:?}",
                    r.verdict, r.tensors, r.format
                );
                for f in &r.findings {
                    println!("  finding @{:?} unsafe={} {}", f.offset, f.unsafe_, f.what);
                }
                let g: Vec<String> = r
                    .globals
                    .iter()
                    .map(|g| {
                        format!(
                            "{}.{}{}",
                            g.module,
                            g.name,
                            if g.allowed { "" } else { "(!)" }
                        )
                    })
                    .collect();
                println!("  globals: {}", g.join(" "));
                println!("  opcodes: {:?}", r.opcodes);
                println!("  records: {}", r.records.len());
                for (k, v) in r.entries.iter().take(5) {
                    println!(
                        "  entry {k} = {}",
                        v.to_text().chars().take(80).collect::<String>()
                    );
                }
            }
            Err(e) => println!("{a}: error {e}"),
        }
    }
}
