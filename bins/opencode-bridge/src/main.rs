fn main() {
    println!("opencode-bridge {}", env!("CARGO_PKG_VERSION"));
}
