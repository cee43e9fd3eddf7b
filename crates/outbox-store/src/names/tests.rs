use super::*;

fn pg(t: &Tables, s: &str) -> String {
    t.render(Dialect::Postgres, s).into_owned()
}

#[test]
fn the_default_is_the_identity_and_borrows() {
    let t = Tables::new(None, "outbox_").unwrap();
    assert!(t.is_canonical());
    let sql = "SELECT id FROM outbox_message";
    assert!(matches!(t.render(Dialect::Postgres, sql), Cow::Borrowed(s) if std::ptr::eq(s, sql)));
    assert!(matches!(Tables::default().render(Dialect::MySql, sql), Cow::Borrowed(_)));
    for m in
        crate::postgres::MIGRATIONS.iter().chain(crate::mysql::MIGRATIONS).chain(crate::sqlite::MIGRATIONS)
    {
        assert!(matches!(t.render(Dialect::Postgres, m.sql), Cow::Borrowed(_)));
    }
    assert_eq!(t.channel(), "outbox_message");
    assert_eq!(t.pg_lock(42), 42);
    assert_eq!(t.mysql_lock("outbox_migrate"), "outbox_migrate");
}

#[test]
fn tables_and_functions_are_qualified_indexes_and_constraints_are_not() {
    let t = Tables::new(Some("s1"), "app_").unwrap();
    assert_eq!(
        pg(&t, "CREATE INDEX outbox_message_due_idx ON outbox_message (next_attempt_at, id)"),
        r#"CREATE INDEX app_message_due_idx ON "s1".app_message (next_attempt_at, id)"#
    );
    assert_eq!(
        pg(
            &t,
            "CREATE TRIGGER outbox_message_notify AFTER INSERT ON outbox_message \
                FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_relay();"
        ),
        r#"CREATE TRIGGER app_message_notify AFTER INSERT ON "s1".app_message FOR EACH STATEMENT EXECUTE FUNCTION "s1".app_notify_relay();"#
    );
    assert_eq!(
        pg(&t, "CHECK (outbox_text_ok(topic)),CONSTRAINT outbox_message_biz_unique UNIQUE"),
        r#"CHECK ("s1".app_text_ok(topic)),CONSTRAINT app_message_biz_unique UNIQUE"#
    );
    // Column references through the table name stay valid (schema.table.column).
    assert_eq!(
        pg(&t, "SELECT outbox_message.id,outbox_delivery.x"),
        r#"SELECT "s1".app_message.id,"s1".app_delivery.x"#
    );
    let my = t.render(
        Dialect::MySql,
        "DROP TRIGGER IF EXISTS outbox_message_open_key_insert; UPDATE outbox_message",
    );
    assert_eq!(my, "DROP TRIGGER IF EXISTS `s1`.app_message_open_key_insert; UPDATE `s1`.app_message");
}

#[test]
fn tokens_are_whole_words() {
    let t = Tables::new(None, "x_").unwrap();
    assert_eq!(pg(&t, "outbox_message_due_idx outbox_message"), "x_message_due_idx x_message");
    // Not names: inside other words, Rust-like paths, file names.
    assert_eq!(
        pg(&t, "my_outbox_message 0001_outbox.sql aoutbox_x"),
        "my_outbox_message 0001_outbox.sql aoutbox_x"
    );
    assert_eq!(pg(&t, "(outbox_message)"), "(x_message)");
    assert_eq!(pg(&t, "@outbox_ddl,outbox_relay;"), "@x_ddl,x_relay;");
    // Quoted identifiers are left as written.
    assert_eq!(
        pg(&t, r#"SELECT "outbox_message" FROM outbox_relay"#),
        r#"SELECT "outbox_message" FROM x_relay"#
    );
    assert_eq!(pg(&t, "outbox_"), "x_");
}

#[test]
fn literals_with_one_name_get_the_prefix_only() {
    let t = Tables::new(Some("s"), "x_").unwrap();
    assert_eq!(pg(&t, "PERFORM pg_notify('outbox_message', '');"), "PERFORM pg_notify('x_message', '');");
    assert_eq!(
        t.render(Dialect::MySql, "WHERE table_schema = DATABASE() AND table_name = 'outbox_message'"),
        "WHERE table_schema = 's' AND table_name = 'x_message'"
    );
    // SQL held in a string is rendered like code.
    assert_eq!(
        t.render(Dialect::MySql, "'ALTER TABLE outbox_message ADD KEY outbox_message_open_head_idx (k)'"),
        "'ALTER TABLE `s`.x_message ADD KEY x_message_open_head_idx (k)'"
    );
    // A quote in a literal does not end it; an apostrophe in a comment opens nothing.
    assert_eq!(pg(&t, "'it''s outbox_x' outbox_relay"), r#"'it''s x_x' "s".x_relay"#);
    assert_eq!(
        pg(&t, "-- the relay's outbox_relay\nSELECT 'a' FROM outbox_relay"),
        "-- the relay's \"s\".x_relay\nSELECT 'a' FROM \"s\".x_relay"
    );
    assert_eq!(t.channel(), "x_message");
}

#[test]
fn every_shipped_name_is_known() {
    // A new object in a migration must be added to the lists above (its length counts).
    let known = |tok: &str| {
        let rest = &tok[CANONICAL_PREFIX.len()..];
        TABLES.contains(&tok)
            || FUNCTIONS.contains(&tok)
            || OTHER_SUFFIXES.contains(&rest)
            || rest.is_empty()
            || rest == "ddl"
    };
    for m in
        crate::postgres::MIGRATIONS.iter().chain(crate::mysql::MIGRATIONS).chain(crate::sqlite::MIGRATIONS)
    {
        for tok in m.sql.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if tok.starts_with(CANONICAL_PREFIX) {
                assert!(known(tok), "{tok} in migration {}", m.version);
            }
        }
    }
}

#[test]
fn bad_identifiers_are_refused_with_the_rule() {
    for (schema, prefix) in [
        (None, "x; drop"),
        (None, "App_"),
        (None, ""),
        (None, "1x_"),
        (None, "é_"),
        (None, "x-"),
        (None, &*"a".repeat(25)),
        (Some("x; drop"), "x_"),
        (Some("Sales"), "x_"),
        (Some(""), "x_"),
        (Some("ü"), "x_"),
        (Some(&*"s".repeat(64)), "x_"),
        (Some("a\"b"), "x_"),
    ] {
        let err = Tables::new(schema, prefix).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::Config(_)), "{text}");
        assert!(text.contains("must match"), "{text}");
    }
    // Shown printable and bounded.
    let text = Tables::new(None, &format!("\u{1b}[31m{}", "y".repeat(10_000))).unwrap_err().to_string();
    assert!(!text.contains('\u{1b}') && text.len() < 400, "{text}");
    assert!(Tables::new(Some(&"s".repeat(63)), &"p".repeat(24)).is_ok());
    assert!(Tables::new(Some("_s"), "p").is_ok());
}

#[test]
fn every_derived_name_fits_63_bytes() {
    let longest = MAX_PREFIX_LEN + longest_suffix();
    assert!(longest <= MAX_NAME_LEN, "{longest}");
    // The check itself: a 40-byte prefix would overflow (refused by the length rule first).
    assert!(40 + longest_suffix() > MAX_NAME_LEN);
    assert!(Tables::new(None, &"p".repeat(40)).is_err());
}

#[test]
fn sqlite_has_no_schema() {
    let t = Tables::new(Some("s"), "x_").unwrap();
    assert!(t.check_for(Dialect::Sqlite).unwrap_err().to_string().contains("SQLite has no schemas"));
    assert!(t.check_for(Dialect::Postgres).is_ok());
    assert!(Tables::new(None, "x_").unwrap().check_for(Dialect::Sqlite).is_ok());
}

#[test]
fn locks_differ_per_names() {
    let a = Tables::new(None, "a_").unwrap();
    let b = Tables::new(None, "b_").unwrap();
    let s = Tables::new(Some("s"), "a_").unwrap();
    assert_ne!(a.pg_lock(7), b.pg_lock(7));
    assert_ne!(a.pg_lock(7), s.pg_lock(7));
    assert_ne!(a.pg_lock(7), a.pg_lock(8));
    assert_eq!(a.mysql_lock("outbox_migrate"), "a_migrate");
    assert!(s.mysql_lock("outbox_inbox_migrate").starts_with("a_inbox_migrate_"));
    assert!(s.mysql_lock("outbox_inbox_migrate").len() <= 64);
    assert_eq!(s.table(Dialect::MySql, "outbox_inbox"), "`s`.a_inbox");
    assert_eq!(a.table(Dialect::Postgres, "outbox_inbox"), "a_inbox");
}
