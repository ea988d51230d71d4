// Nothing of its own: the shared object the Python, Rust and Go checks load when memcg itself is
// built static (the default), made of the whole static library with the shared library's version
// script, so that it exports what libmemcg.so does (tests/c_api/CMakeLists.txt).
