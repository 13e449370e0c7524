//! Opens each file given on the command line and prints its tensors or the error.
use weightport_core::{ReadOptions, TensorSource};

fn main() {
    for a in std::env::args().skip(1) {
        match weightport_pickle::open_checkpoint(std::path::Path::new(&a), &ReadOptions::default())
        {
            Ok(c) => {
                println!("{a}: {} tensors", c.tensors().len());
                for t in c.tensors() {
                    println!("  {} {} {:?}", t.name, t.dtype, t.shape);
                }
            }
            Err(e) => println!("{a}: [exit {}] {e}", e.exit_code()),
        }
    }
}
