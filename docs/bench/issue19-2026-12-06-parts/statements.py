"""The relay's PostgreSQL statements, read from the Rust source as the relay sends them.

`const(NAME)` expands a `const NAME: &str = concat!(...)` of
crates/outbox-store/src/postgres/relay.rs: string literals (with Rust's escapes and line
continuations), `message_columns!("x")` and the file's argument-less macros (`walk_heads!()`...).
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


def pg_time(a, col):
    """`pg_time!` of crates/outbox-store/src/postgres/mod.rs."""
    return (f"CASE WHEN {a}.{col} < '1970-01-01 00:00:00+00'::timestamptz THEN '1970-01-01 00:00:00+00'::timestamptz "
            f"WHEN {a}.{col} > '9999-12-31 00:00:00+00'::timestamptz THEN '9999-12-31 00:00:00+00'::timestamptz "
            f"ELSE {a}.{col} END AS {col}")


def message_columns(a):
    """`message_columns!` of crates/outbox-store/src/postgres/mod.rs."""
    cols = [f"{a}.{c}" for c in ('id', 'biz_type', 'biz_key', 'topic', 'msg_key', 'tag')]
    cols += [f"{a}.headers::text AS headers"]
    cols += [f"{a}.{c}" for c in ('payload', 'status', 'attempts', 'max_attempts')]
    cols += [pg_time(a, 'next_attempt_at'), pg_time(a, 'last_attempt_at'), f"{a}.last_error", f"{a}.lease_owner",
             pg_time(a, 'lease_until'), f"{a}.created_by", f"{a}.updated_by", pg_time(a, 'created_at'),
             pg_time(a, 'updated_at')]
    return ', '.join(cols)


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
