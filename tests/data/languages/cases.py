"""The programs behind the recorded fixtures: one or more per failure class per language.

Each case names the class and ``file:line`` the parsers must report for it. ``limits``
are ``prlimit`` options applied to the program (the run step) only; ``ram_mib`` is
passed to the step builder, which sizes the JVM's and V8's heaps from it.
"""

from __future__ import annotations

from typing import Any

MiB = 1 << 20


def case(
    language: str,
    name: str,
    code: str,
    cls: str | None,
    location: str = "",
    *,
    request_type: str = "run_entry",
    limits: tuple[str, ...] = (),
    ram_mib: int | None = None,
    timeout_s: float = 20.0,
) -> dict[str, Any]:
    return {
        "language": language,
        "name": name,
        "request_type": request_type,
        "code": code,
        "expected_class": cls,
        "expected_location": location,
        "limits": list(limits),
        "ram_mib": ram_mib,
        "timeout_s": timeout_s,
    }


C_MAIN = '#include <stdio.h>\n\nint main(void) {\n    printf("hello\\n");\n    return 0;\n}\n'

# One case a line: a table to read down, not code to reflow.
# fmt: off
CASES: list[dict[str, Any]] = [
    # ---- C ----------------------------------------------------------------------------------
    case('c', 'pass', '#include <stdio.h>\n\nint main(void) {\n    printf("hello\\n");\n    return 0;\n}\n', None),
    case('c', 'build_pass', '#include <stdio.h>\n\nint main(void) {\n    printf("hello\\n");\n    return 0;\n}\n', None, '', request_type='build_check'),
    case('c', 'syntax', '#include <stdio.h>\n\nint main(void) {\n    int x = 1\n    printf("%d\\n", x);\n    return 0;\n}\n', 'syntax', 'main.c:5'),
    case('c', 'build_syntax', 'int main(void) {\n    return (1 + ;\n}\n', 'syntax', 'main.c:2', request_type='build_check'),
    case('c', 'compile_undeclared', '#include <stdio.h>\n\nint main(void) {\n    printf("%d\\n", count);\n    return 0;\n}\n', 'compile', 'main.c:4'),
    case('c', 'compile_link', 'int helper(int x);\n\nint main(void) {\n    return helper(2);\n}\n', 'compile', 'main.c:4'),
    case('c', 'build_link', 'int helper(int x);\n\nint main(void) {\n    return helper(2);\n}\n', 'compile', 'main.c:4', request_type='build_check'),
    case('c', 'type', 'struct point { int x, y; };\n\nint main(void) {\n    struct point p = {1, 2};\n    int n = p;\n    return n;\n}\n', 'type', 'main.c:5'),
    case('c', 'type_int_conversion', 'int main(void) {\n    int n = 5;\n    int *p = n;\n    return *p;\n}\n', 'type', 'main.c:3'),
    case('c', 'dependency', '#include <stdio.h>\n#include <gmp_not_installed.h>\n\nint main(void) {\n    return 0;\n}\n', 'dependency', 'main.c:2'),
    case('c', 'assertion', '#include <assert.h>\n\nint main(void) {\n    int x = 1;\n    assert(x == 2);\n    return 0;\n}\n', 'assertion', 'main.c:5'),
    case('c', 'runtime_segv', '#include <stddef.h>\n\nint main(void) {\n    volatile int *p = NULL;\n    *p = 1;\n    return 0;\n}\n', 'runtime'),
    case('c', 'runtime_exit', '#include <stdio.h>\n\nint main(void) {\n    fprintf(stderr, "bad input\\n");\n    return 3;\n}\n', 'runtime'),
    case('c', 'resource_fsize', '#include <stdio.h>\n\nint main(void) {\n    FILE *f = fopen("big.bin", "wb");\n    for (int i = 0; i < 4096; i++) fwrite("0123456789abcdef", 1, 16, f);\n    fclose(f);\n    return 0;\n}\n', 'resource', '', limits=('--fsize=1024',)),
    case('c', 'timeout', 'int main(void) {\n    volatile unsigned long n = 0;\n    for (;;) n++;\n}\n', 'timeout', '', timeout_s=2.0),
    # ---- C++ --------------------------------------------------------------------------------
    case('cpp', 'pass', '#include <iostream>\n\nint main() {\n    std::cout << "hello" << std::endl;\n}\n', None),
    case('cpp', 'syntax', 'struct Point {\n    int x;\n}\n\nint main() {\n    Point p{1};\n    return p.x;\n}\n', 'syntax', 'main.cpp:3'),
    case('cpp', 'compile_undeclared', '#include <iostream>\n\nint main() {\n    std::cout << total << std::endl;\n}\n', 'compile', 'main.cpp:4'),
    case('cpp', 'type', '#include <string>\n\nint main() {\n    std::string s = "a";\n    int n = s;\n    return n;\n}\n', 'type', 'main.cpp:5'),
    case('cpp', 'type_invalid_conversion', 'int main() {\n    const char *s = "x";\n    int *p = s;\n    return *p;\n}\n', 'type', 'main.cpp:3'),
    case('cpp', 'dependency', '#include <boost/not_installed.hpp>\n\nint main() {\n    return 0;\n}\n', 'dependency', 'main.cpp:1'),
    case('cpp', 'assertion', '#include <cassert>\n#include <vector>\n\nint main() {\n    std::vector<int> v{1, 2};\n    assert(v.size() == 3);\n}\n', 'assertion', 'main.cpp:6'),
    case('cpp', 'resource_bad_alloc', '#include <iostream>\n#include <vector>\n\nint main() {\n    std::vector<char> v(size_t(1) << 30);\n    std::cout << v.size() << std::endl;\n}\n', 'resource', '', limits=(f"--as={256 * MiB}",)),
    case('cpp', 'runtime_exception', '#include <stdexcept>\n\nint main() {\n    throw std::runtime_error("boom");\n}\n', 'runtime'),
    case('cpp', 'compile_link', 'int helper(int x);\n\nint main() {\n    return helper(2);\n}\n', 'compile', 'main.cpp:4'),
    case('cpp', 'build_compile', 'int main() {\n    return missing();\n}\n', 'compile', 'main.cpp:2', request_type='build_check'),
    case('cpp', 'timeout', 'int main() {\n    volatile unsigned long n = 0;\n    for (;;) n++;\n}\n', 'timeout', '', timeout_s=2.0),
    # ---- Rust -------------------------------------------------------------------------------
    case('rust', 'pass', 'fn main() {\n    println!("hello");\n}\n', None),
    case('rust', 'syntax', 'fn main() {\n    let x = 1\n    println!("{}", x);\n}\n', 'syntax', 'main.rs:2'),
    case('rust', 'compile_unresolved', 'fn main() {\n    println!("{}", total);\n}\n', 'compile', 'main.rs:2'),
    case('rust', 'compile_link', 'extern "C" {\n    fn helper_not_defined() -> i32;\n}\n\nfn main() {\n    std::process::exit(unsafe { helper_not_defined() });\n}\n', 'compile'),
    case('rust', 'compile_undeclared_type', 'fn main() {\n    let s = Strng::new();\n    println!("{}", s);\n}\n', 'compile', 'main.rs:2'),
    case('rust', 'type', 'fn main() {\n    let n: i32 = "seven";\n    println!("{}", n);\n}\n', 'type', 'main.rs:2'),
    case('rust', 'dependency_import', 'use rand::Rng;\n\nfn main() {\n    let n: u8 = rand::thread_rng().gen();\n    println!("{}", n);\n}\n', 'dependency', 'main.rs:1'),
    case('rust', 'dependency_crate', 'extern crate serde;\n\nfn main() {}\n', 'dependency', 'main.rs:1'),
    case('rust', 'assertion', 'fn main() {\n    let v = vec![1, 2];\n    assert_eq!(v.len(), 3, "two items");\n}\n', 'assertion', 'main.rs:3'),
    case('rust', 'assertion_assert', 'fn main() {\n    let x = 1;\n    assert!(x > 2);\n}\n', 'assertion', 'main.rs:3'),
    case('rust', 'resource_alloc', 'fn main() {\n    let v = vec![1u8; 1 << 30];\n    println!("{}", v.len());\n}\n', 'resource', '', limits=(f"--as={256 * MiB}",)),
    case('rust', 'runtime_unwrap', 'fn main() {\n    let v: Vec<i32> = Vec::new();\n    let first = v.first().copied();\n    println!("{}", first.unwrap());\n}\n', 'runtime', 'main.rs:4'),
    case('rust', 'runtime_index', 'fn main() {\n    let v = vec![1, 2, 3];\n    let i = v.len();\n    println!("{}", v[i]);\n}\n', 'runtime', 'main.rs:4'),
    case('rust', 'build_type', 'fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nfn main() {\n    add(1, "2");\n}\n', 'type', 'main.rs:6', request_type='build_check'),
    case('rust', 'timeout', 'fn main() {\n    let mut n: u64 = 0;\n    loop {\n        n = std::hint::black_box(n + 1);\n    }\n}\n', 'timeout', '', timeout_s=2.0),
    # ---- Java -------------------------------------------------------------------------------
    case('java', 'pass', 'public class Main {\n    public static void main(String[] args) {\n        System.out.println("hello");\n    }\n}\n', None),
    case('java', 'syntax', 'public class Main {\n    public static void main(String[] args) {\n        int x = 1\n        System.out.println(x);\n    }\n}\n', 'syntax', 'Main.java:3'),
    case('java', 'compile_symbol', 'public class Main {\n    public static void main(String[] args) {\n        System.out.println(total);\n    }\n}\n', 'compile', 'Main.java:3'),
    case('java', 'type', 'public class Main {\n    public static void main(String[] args) {\n        int n = "seven";\n        System.out.println(n);\n    }\n}\n', 'type', 'Main.java:3'),
    case('java', 'dependency', 'import org.apache.commons.lang3.StringUtils;\n\npublic class Main {\n    public static void main(String[] args) {\n        System.out.println(StringUtils.capitalize("x"));\n    }\n}\n', 'dependency', 'Main.java:1'),
    case('java', 'dependency_wildcard', 'import com.google.common.collect.*;\n\npublic class Main {\n    public static void main(String[] args) {\n        System.out.println(ImmutableList.of(1));\n    }\n}\n', 'dependency', 'Main.java:1'),
    case('java', 'assertion', 'public class Main {\n    public static void main(String[] args) {\n        int x = 1;\n        assert x == 2 : "x should be two";\n    }\n}\n', 'assertion', 'Main.java:4'),
    case('java', 'resource_heap', 'import java.util.ArrayList;\nimport java.util.List;\n\npublic class Main {\n    public static void main(String[] args) {\n        List<long[]> keep = new ArrayList<>();\n        while (true) {\n            keep.add(new long[1 << 20]);\n        }\n    }\n}\n', 'resource', 'Main.java:8', ram_mib=256),
    case('java', 'runtime_exception', 'public class Main {\n    static int div(int a, int b) {\n        return a / b;\n    }\n\n    public static void main(String[] args) {\n        System.out.println(div(1, 0));\n    }\n}\n', 'runtime', 'Main.java:3'),
    case('java', 'runtime_exit', 'public class Main {\n    public static void main(String[] args) {\n        System.exit(2);\n    }\n}\n', 'runtime'),
    case('java', 'compile_no_main_class', 'class Program {\n    public static void main(String[] args) {\n        System.out.println(1);\n    }\n}\n', 'compile', 'Main.java'),
    case('java', 'build_syntax', 'public class Main {\n    public static void main(String[] args) {\n        System.out.println("x")\n    }\n}\n', 'syntax', 'Main.java:3', request_type='build_check'),
    case('java', 'timeout', 'public class Main {\n    public static void main(String[] args) {\n        long n = 0;\n        while (true) {\n            n++;\n        }\n    }\n}\n', 'timeout', '', timeout_s=3.0),
    # ---- JavaScript -------------------------------------------------------------------------
    case('javascript', 'pass', "console.log('hello');\n", None),
    case('javascript', 'build_pass', "console.log('hello');\n", None, '', request_type='build_check'),
    case('javascript', 'syntax', 'function f() {\n  return 1 +;\n}\nconsole.log(f());\n', 'syntax', 'main.js:2'),
    case('javascript', 'build_syntax', 'const x = {\n  a: 1,\n  b: 2\n;\n', 'syntax', 'main.js:4', request_type='build_check'),
    case('javascript', 'type', 'const cfg = undefined;\n\nfunction port(c) {\n  return c.port;\n}\nconsole.log(port(cfg));\n', 'type', 'main.js:4'),
    case('javascript', 'dependency', "const leftPad = require('left-pad-not-installed');\nconsole.log(leftPad('x', 3));\n", 'dependency', 'main.js:1'),
    case('javascript', 'assertion', "const assert = require('assert');\n\nconst total = [1, 2].length;\nassert.strictEqual(total, 3, 'two items');\n", 'assertion', 'main.js:4'),
    case('javascript', 'resource_heap', 'const keep = [];\nwhile (true) {\n  keep.push(new Array(100000).fill({ x: keep.length }));\n}\n', 'resource', '', ram_mib=32),
    case('javascript', 'runtime_throw', "function load() {\n  throw new Error('config missing');\n}\nload();\n", 'runtime', 'main.js:2'),
    case('javascript', 'runtime_rejection', "async function main() {\n  await null;\n  throw new RangeError('bad range');\n}\nmain();\n", 'runtime', 'main.js:3'),
    case('javascript', 'runtime_json', 'const cfg = JSON.parse(\'{"port": \');\nconsole.log(cfg);\n', 'runtime', 'main.js:1'),
    case('javascript', 'runtime_exit', "console.error('bad input');\nprocess.exit(3);\n", 'runtime'),
    case('javascript', 'timeout', 'let n = 0;\nwhile (true) {\n  n++;\n}\n', 'timeout', '', timeout_s=2.0),
    # ---- SQL --------------------------------------------------------------------------------
    case('sql', 'pass', '.mode list\nCREATE TABLE t(a INTEGER);\nINSERT INTO t VALUES (1), (2);\nSELECT sum(a) FROM t;\n', None),
    case('sql', 'build_pass', '.mode list\nCREATE TABLE t(a INTEGER);\nINSERT INTO t VALUES (1), (2);\n-- the table exists for the statements after it\nSELECT sum(a)\n  FROM t;\n', None, '', request_type='build_check'),
    case('sql', 'syntax', 'CREATE TABLE t(a INTEGER);\nINSERT INTO t VALUES (1);\nSELEC a FROM t;\n', 'syntax', 'main.sql:3'),
    case('sql', 'build_syntax', 'CREATE TABLE t(a INTEGER);\nSELECT a FROM t WHERE;\n', 'syntax', 'main.sql:2', request_type='build_check'),
    case('sql', 'compile_no_table', 'CREATE TABLE t(a INTEGER);\nINSERT INTO t VALUES (1);\nSELECT a FROM missing_table;\n', 'compile', 'main.sql:3'),
    case('sql', 'compile_no_column', 'CREATE TABLE t(a INTEGER);\nSELECT b\n  FROM t;\n', 'compile', 'main.sql:2'),
    case('sql', 'build_no_column', 'CREATE TABLE t(a INTEGER);\nINSERT INTO t VALUES (1);\nSELECT b FROM t;\n', 'compile', 'main.sql:3', request_type='build_check'),
    case('sql', 'compile_no_function', 'SELECT no_such_fn(1);\n', 'compile', 'main.sql:1'),
    case('sql', 'type_strict', "CREATE TABLE t(a INTEGER) STRICT;\nINSERT INTO t VALUES (1);\nINSERT INTO t VALUES ('one');\n", 'type', 'main.sql:3'),
    case('sql', 'dependency_module', 'CREATE VIRTUAL TABLE docs USING not_a_module(body);\n', 'dependency', 'main.sql:1'),
    case('sql', 'resource_memory', 'SELECT length(randomblob(400000000));\n', 'resource', 'main.sql:1', limits=(f"--as={256 * MiB}",)),
    case('sql', 'runtime_constraint', 'CREATE TABLE t(a INTEGER UNIQUE);\nINSERT INTO t VALUES (1);\nINSERT INTO t VALUES (1);\n', 'runtime', 'main.sql:3'),
    case('sql', 'timeout', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)\nSELECT count(*) FROM c;\n', 'timeout', '', timeout_s=2.0),
    case('bash', 'pass', 'read a b\necho $((a + b))\n', None),
    case('bash', 'build_pass', 'for i in 1 2; do\n  echo "$i"\ndone\n', None, '', request_type='build_check'),
    case('bash', 'syntax', 'echo before\nif true; then\n  echo inside\nfi fi\n', 'syntax', 'main.sh:4'),
    case('bash', 'syntax_eof', 'echo before\nif true; then\n  echo inside\n', 'syntax', 'main.sh:4'),
    case('bash', 'build_syntax', 'while true\n  echo x\ndone\n', 'syntax', 'main.sh:3', request_type='build_check'),
    case('bash', 'dependency', 'echo start\nno_such_tool_aexec --version\n', 'dependency', 'main.sh:2'),
    case('bash', 'runtime_exit', 'echo working\nexit 3\n', 'runtime', ''),
    case('bash', 'runtime_unbound', 'set -u\necho "$missing"\n', 'runtime', 'main.sh:2'),
    case('bash', 'runtime_arith', 'echo start\nx=$(( 1 + ))\n', 'runtime', 'main.sh:2'),
    case('bash', 'resource_fsize', 'printf "%5000s" x > big.txt\n', 'resource', '', limits=('--fsize=1024',)),
    case('bash', 'timeout', 'while :; do :; done\n', 'timeout', '', timeout_s=2.0),
]
# fmt: on
