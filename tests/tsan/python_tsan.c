/* python_tsan - the Python interpreter with ThreadSanitizer's runtime linked in, for make tsan.
 *
 * The Python tests of make tsan (scripts/tsan.sh) load the TSan build of libs3direct.so into
 * Python. That library calls __tsan_* functions and needs the runtime in the process before
 * any thread starts. clang 14's shared runtime (libclang_rt.tsan-x86_64.so) cannot be
 * LD_PRELOADed here: it crashes before main in every program, since libstdc++'s initialiser
 * calls its __cxa_atexit interceptor before the runtime is set up; GCC's libtsan.so preloads
 * into python but crashes bash and dash, which the tests start as children. So this program,
 * built with -fsanitize=thread, carries the static runtime (as every test binary does) and
 * exports its symbols, and is otherwise python3: Py_BytesMain with the same arguments.
 * sys.executable is this program, so Python children started by the tests run under TSan too.
 */
#include <Python.h>

int main(int argc, char **argv)
{
    return Py_BytesMain(argc, argv);
}
