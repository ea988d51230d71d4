// Where libmemcg is: MEMCG_LIB_DIR (a directory holding libmemcg.so.<SOVERSION>, e.g. the build
// tree) links that shared object by its file name, so that the static libmemcg.a beside it is not
// picked; without it, `-lmemcg` from the system's library path (pkg-config memcg-c gives the
// same), where the static archive needs the C++ runtime too.
fn main() {
    println!("cargo:rerun-if-env-changed=MEMCG_LIB_DIR");
    println!("cargo:rerun-if-env-changed=MEMCG_LIB_NAME");
    match std::env::var("MEMCG_LIB_DIR") {
        Ok(dir) => {
            println!("cargo:rustc-link-search=native={dir}");
            let name = std::env::var("MEMCG_LIB_NAME").unwrap_or_else(|_| "memcg".into());
            println!("cargo:rustc-link-lib=dylib={name}");
        }
        Err(_) => {
            println!("cargo:rustc-link-lib=memcg");
            println!("cargo:rustc-link-lib=stdc++");
        }
    }
}
