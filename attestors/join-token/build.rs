//! Links the component with a 64 KiB stack instead of the linker's 1 MiB. The stack is most of
//! a component's initial linear memory, and after every call the host resets a reused instance
//! slot by scanning that memory's pages for the ones written (issue 14: the attestor call).
//! join-token recurses on nothing an agent sends (its largest frames are serde's, on its
//! configuration's JSON); should it ever overflow, the guest traps and the join is refused,
//! never admitted.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-cdylib-link-arg=-zstack-size=65536");
    }
}
