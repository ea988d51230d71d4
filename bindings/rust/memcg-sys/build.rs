// Where libmemcg is, in this order:
//  - MEMCG_LIB_DIR: a directory holding the shared library (the build tree): linked from there
//    as a shared object (MEMCG_LIB_NAME, default "memcg");
//  - otherwise the `pkg-config` program (PKG_CONFIG names another one): `pkg-config --libs
//    memcg-c`, the C API's file, which an install prefix has in <libdir>/pkgconfig (set
//    PKG_CONFIG_PATH for a prefix pkg-config does not search). Its -L directories and -l
//    libraries are passed on; the install's `libmemcg.so` link makes `-lmemcg` the shared
//    object, which carries the C++ runtime.
// No crate is used: the program is run as a user would run it.
use std::process::Command;

fn main() {
    for var in [
        "MEMCG_LIB_DIR",
        "MEMCG_LIB_NAME",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Ok(dir) = std::env::var("MEMCG_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
        let name = std::env::var("MEMCG_LIB_NAME").unwrap_or_else(|_| "memcg".into());
        println!("cargo:rustc-link-lib=dylib={name}");
        return;
    }
    let program = std::env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let output = Command::new(&program)
        .args(["--libs", "memcg-c"])
        .output()
        .unwrap_or_else(|e| fail(&format!("could not run `{program}`: {e}")));
    if !output.status.success() {
        fail(&format!(
            "`{program} --libs memcg-c` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let libs = String::from_utf8_lossy(&output.stdout).into_owned();
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            // For a program of this crate's users: where the library was found.
            println!("cargo:libdir={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        } else if flag == "-pthread" {
            println!("cargo:rustc-link-lib=pthread");
        }
    }
}

fn fail(why: &str) -> ! {
    panic!(
        "memcg-sys: libmemcg not found: {why}.\n\
         Install libmemcg-dev (memcg-c.pc), or set PKG_CONFIG_PATH to <prefix>/lib/pkgconfig of \
         an install (cmake --install <build> --prefix <prefix>), or MEMCG_LIB_DIR to a directory \
         holding libmemcg.so."
    )
}
