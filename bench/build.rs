//! Builds the benchmark's component (`attestors/bench-tpm-verify`, the tpm checks compiled into
//! wasm) and embeds it: writes `$OUT_DIR/bench_components.rs` with `BENCH_COMPONENTS`,
//! `(package, component bytes)`, which `src/lib.rs` includes. The built-in attestors come from
//! the `gatehouse` library, which embeds them.

fn main() {
    let built = gatehouse_build_support::build_components(
        std::path::Path::new("../attestors/Cargo.toml"),
        &["gatehouse-bench-tpm-verify"],
    );
    gatehouse_build_support::embed_components(
        "bench_components.rs",
        "static BENCH_COMPONENTS",
        "Benchmark-only components: `(package, component)`.",
        &built,
    );
}
