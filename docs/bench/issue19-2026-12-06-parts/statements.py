"""The relay's PostgreSQL statements, read from the Rust source as the relay sends them.

`const(NAME)` expands a `const NAME: &str = concat!(...)` of
crates/outbox-store/src/postgres/relay.rs: string literals (with Rust's escapes and line
continuations), `message_columns!("x")` (and the `pg_time!` it calls, from postgres/mod.rs) and
relay.rs's argument-less macros (`walk_heads!()`...).
Reading the source, not a copy, keeps the measurement on the code of record.
"""
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
SRC = open(os.path.join(ROOT, 'crates/outbox-store/src/postgres/relay.rs')).read()


def unescape(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == '\\':
            n = body[i + 1]
            if n == '\n':  # a line continuation: the newline and the next line's indent go
                i += 2
                while i < len(body) and body[i] in ' \t\n':
                    i += 1
                continue
            out.append({'n': '\n', 't': '\t', '\\': '\\', '"': '"', "'": "'"}[n])
            i += 2
            continue
        out.append(c)
        i += 1
    return ''.join(out)


MOD = open(os.path.join(ROOT, 'crates/outbox-store/src/postgres/mod.rs')).read()


def _macro_arms(name):
    """The body of `macro_rules! name` in mod.rs with one arm."""
    return re.search(r'macro_rules! ' + name + r' \{\s*\((.*?)\) => \{(.*?)\n    \};\n\}', MOD, re.S).groups()


def _expand_mod(body, args):
    """A mod.rs macro's `concat!` body with its `$params` bound to `args` (names to strings)."""
    out = []
    for var, call, call_args, lit in re.findall(
            r'\$(\w+)|(\w+)!\(((?:[^()"]|"(?:[^"\\]|\\.)*")*)\)|"((?:[^"\\]|\\.)*)"', body, re.S):
        if var:
            out.append(args[var])
        elif call == 'concat':
            out.append(_expand_mod(call_args, args))
        elif call:
            params, inner = _macro_arms(call)
            names = re.findall(r'\$(\w+)', params)
            values = [args[v[1:]] if v.startswith('$') else unescape(v.strip('"'))
                      for v in (x.strip() for x in call_args.split(','))]
            out.append(_expand_mod(inner, dict(zip(names, values))))
        else:
            out.append(unescape(lit))
    return ''.join(out)


def message_columns(a):
    """`message_columns!(a)` of crates/outbox-store/src/postgres/mod.rs, expanded from its source."""
    params, body = _macro_arms('message_columns')
    return _expand_mod(body, {re.findall(r'\$(\w+)', params)[0]: a})


def _macro(name):
    m = re.search(r'macro_rules! ' + name + r' \{\s*\(\) => \{(.*?)\n    \};\n\}', SRC, re.S)
    return _expand(m.group(1))


def _expand(s):
    out = []
    for mc, mac, lit in re.findall(r'message_columns!\("(\w)"\)|(\w+)!\(\)|"((?:[^"\\]|\\.)*)"', s, re.S):
        if mc:
            out.append(message_columns(mc))
        elif mac:
            out.append(_macro(mac))
        else:
            out.append(unescape(lit))
    return ''.join(out)


def const(name):
    return _expand(re.search(r'const ' + name + r': &str =\s*(.*?);\n', SRC, re.S).group(1))


if __name__ == '__main__':
    import sys
    print(const(sys.argv[1]))
