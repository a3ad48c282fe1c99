//! The build script of the built-in attestors that link a 64 KiB stack instead of the
//! linker's 1 MiB (join-token, provisioned: `build = "../small-stack.rs"`). The stack is most of
//! a component's initial linear memory, and after every call the host resets a reused instance
//! slot by scanning that memory's pages for the ones written (issue 14: the attestor call).
//! These attestors recurse on nothing an agent sends (their largest frames are serde's, on
//! their configuration's JSON); should one ever overflow, the guest traps and the join is
//! refused, never admitted.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-cdylib-link-arg=-zstack-size=65536");
    }
}
