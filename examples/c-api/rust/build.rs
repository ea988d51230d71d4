// Where the memcg shared library is: MEMCG_LIB_DIR (a directory holding libmemcg.so) and
// MEMCG_LIB_NAME (default "memcg"). A -sys crate would ask pkg-config (memcg-c.pc) instead.
fn main() {
    println!("cargo:rerun-if-env-changed=MEMCG_LIB_DIR");
    println!("cargo:rerun-if-env-changed=MEMCG_LIB_NAME");
    if let Ok(dir) = std::env::var("MEMCG_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    let name = std::env::var("MEMCG_LIB_NAME").unwrap_or_else(|_| "memcg".to_string());
    println!("cargo:rustc-link-lib=dylib={name}");
}
