//! The `weightport` command: everything is in the library ([`weightport::main`]), which the
//! Python wheel's `weightport` command and API call too.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(weightport::main(std::env::args_os()))
}
