// Where libmemcg is, in this order:
//  - MEMCG_LIB_DIR: a directory holding the shared library (the build tree): linked from there
//    as a shared object (MEMCG_LIB_NAME, default "memcg");
//  - otherwise the `pkg-config` program (PKG_CONFIG names another one): `pkg-config --libs
//    memcg-c`, the C API's file, which an install prefix has in <libdir>/pkgconfig (set
//    PKG_CONFIG_PATH for a prefix pkg-config does not search). Its -L directories and -l
//    libraries are passed on; the install's `libmemcg.so` link makes `-lmemcg` the shared
//    object, which carries the C++ runtime.
// With the feature `http`, libmemcg_http (the HTTP endpoint's C API) the same way: from
// MEMCG_HTTP_LIB_DIR, else `pkg-config --libs memcg-c-http`.
// No crate is used: the program is run as a user would run it.
use std::process::Command;

fn main() {
    for var in [
        "MEMCG_LIB_DIR",
        "MEMCG_LIB_NAME",
        "MEMCG_HTTP_LIB_DIR",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let name = std::env::var("MEMCG_LIB_NAME").unwrap_or_else(|_| "memcg".into());
    link("libmemcg", "MEMCG_LIB_DIR", &name, "memcg-c", true);
    if std::env::var_os("CARGO_FEATURE_HTTP").is_some() {
        link(
            "libmemcg_http",
            "MEMCG_HTTP_LIB_DIR",
            "memcg_http",
            "memcg-c-http",
            false,
        );
    }
}

/// Links `lib` from the directory `dir_var` names, else from what pkg-config says of `module`.
/// `main`: the core library, whose directory is told to dependent crates (`cargo:libdir`).
fn link(what: &str, dir_var: &str, lib: &str, module: &str, main: bool) {
    if let Ok(dir) = std::env::var(dir_var) {
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-lib=dylib={lib}");
        return;
    }
    let program = std::env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let output = Command::new(&program)
        .args(["--libs", module])
        .output()
        .unwrap_or_else(|e| {
            fail(
                what,
                dir_var,
                module,
                &format!("could not run `{program}`: {e}"),
            )
        });
    if !output.status.success() {
        fail(
            what,
            dir_var,
            module,
            &format!(
                "`{program} --libs {module}` failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        );
    }
    let libs = String::from_utf8_lossy(&output.stdout).into_owned();
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            if main {
                // For a program of this crate's users: where the library was found.
                println!("cargo:libdir={dir}");
            }
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        } else if flag == "-pthread" {
            println!("cargo:rustc-link-lib=pthread");
        }
    }
}

fn fail(what: &str, dir_var: &str, module: &str, why: &str) -> ! {
    panic!(
        "memcg-sys: {what} not found: {why}.\n\
         Install libmemcg-dev ({module}.pc), or set PKG_CONFIG_PATH to <prefix>/lib/pkgconfig of \
         an install (cmake --install <build> --prefix <prefix>), or {dir_var} to a directory \
         holding {what}.so."
    )
}
