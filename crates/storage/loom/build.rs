//! Declares the `loom` cfg, as the engine's own build script does, so that ordinary builds
//! of this package do not warn about it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
