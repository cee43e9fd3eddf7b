import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * Enqueue outbox messages from Java on MySQL 8 / MariaDB with plain JDBC. See
 * docs/sql-contract.md.
 *
 * <pre>
 * javac -d out EnqueueMysql.java
 * java -cp out:/usr/share/java/mariadb-java-client.jar EnqueueMysql \
 *     'jdbc:mariadb://127.0.0.1:3306/DB?user=root' N
 * </pre>
 *
 * Creates N orders. Each order is ONE transaction: the business row in {@code shop_order} and
 * its message in {@code outbox_message} commit together or not at all. Odd orders use the
 * minimal insert (topic, payload), even ones the fuller insert (key, idempotency pair,
 * headers). Then a retried enqueue returns the existing message, and a failed order is rolled
 * back, leaving no trace. Prints {@code committed <id> order=<n> variant=minimal|full},
 * {@code duplicate <id> order=<n>} and {@code rolled-back order=<n>} lines.
 */
public final class EnqueueMysql {
    static final String TOPIC = "shop.order.created";
    static final int ER_DUP_ENTRY = 1062; // MySQL/MariaDB error code of a unique-key violation

    /** The id of a message and whether this call created it (false: it already existed). */
    record Enqueued(long id, boolean created) {}

    /** Runs an INSERT and returns the AUTO_INCREMENT id it generated. */
    static long insert(PreparedStatement ps) throws SQLException {
        ps.executeUpdate();
        try (ResultSet keys = ps.getGeneratedKeys()) {
            keys.next();
            return keys.getLong(1);
        }
    }

    /** The whole contract: topic and payload. Every other column has a default. */
    static long enqueueMinimal(Connection c, String payload) throws SQLException {
        String sql = "INSERT INTO outbox_message (topic, payload) VALUES (?, ?)";
        try (PreparedStatement ps = c.prepareStatement(sql, Statement.RETURN_GENERATED_KEYS)) {
            ps.setString(1, TOPIC);
            ps.setString(2, payload);
            return insert(ps);
        }
    }

    /**
     * Ordering key, idempotency pair and headers. A duplicate (biz_type, biz_key) fails with
     * error 1062, which undoes only this statement (the business row stays); the existing
     * message is then read with a locking read, which sees the latest committed row whatever
     * the transaction's REPEATABLE READ snapshot.
     */
    static Enqueued enqueueFull(Connection c, long orderId, String payload) throws SQLException {
        String sql = "INSERT INTO outbox_message (topic, payload, msg_key, biz_type, biz_key, headers, created_by)"
                + " VALUES (?, ?, ?, ?, ?, ?, ?)";
        try (PreparedStatement ps = c.prepareStatement(sql, Statement.RETURN_GENERATED_KEYS)) {
            ps.setString(1, TOPIC);
            ps.setString(2, payload);
            ps.setString(3, "order-" + orderId); // msg_key: same key => published in id order
            ps.setString(4, "order"); // biz_type + biz_key: unique together
            ps.setString(5, Long.toString(orderId));
            // Build the JSON with your JSON library; it must be an object.
            ps.setString(6, "{\"source\": \"java\", \"trace-id\": \"trace-" + orderId + "\"}");
            ps.setString(7, "EnqueueMysql.java");
            return new Enqueued(insert(ps), true);
        } catch (SQLException e) {
            if (e.getErrorCode() != ER_DUP_ENTRY || !String.valueOf(e.getMessage()).contains("outbox_message_biz_unique")) {
                throw e;
            }
        }
        String existing = "SELECT id FROM outbox_message WHERE biz_type = ? AND biz_key = ? LOCK IN SHARE MODE";
        try (PreparedStatement ps = c.prepareStatement(existing)) {
            ps.setString(1, "order");
            ps.setString(2, Long.toString(orderId));
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return new Enqueued(rs.getLong(1), false);
            }
        }
    }

    /** The business change; returns the message payload describing it. */
    static String createOrder(Connection c, long orderId, long amountCents) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO shop_order (id, amount_cents) VALUES (?, ?)")) {
            ps.setLong(1, orderId);
            ps.setLong(2, amountCents);
            ps.executeUpdate();
        }
        return "{\"order_id\": " + orderId + ", \"amount_cents\": " + amountCents + "}";
    }

    static final class PaymentDeclined extends Exception {
        private static final long serialVersionUID = 1L;

        PaymentDeclined(long orderId) {
            super("payment declined for order " + orderId);
        }
    }

    public static void main(String[] args) throws SQLException {
        long n = args.length == 2 ? parsePositive(args[1]) : 0;
        if (n < 1 || !(args[0].startsWith("jdbc:mariadb:") || args[0].startsWith("jdbc:mysql:"))) {
            System.err.println("usage: java EnqueueMysql 'jdbc:mariadb://HOST:PORT/DB?user=USER' N"
                    + "   (N: number of orders, >= 1)");
            System.exit(2);
        }
        try (Connection c = DriverManager.getConnection(args[0])) {
            long first;
            try (Statement st = c.createStatement()) {
                // DDL commits implicitly in MySQL: keep it out of the business transactions.
                st.execute("CREATE TABLE IF NOT EXISTS shop_order (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL)");
                try (ResultSet rs = st.executeQuery("SELECT COALESCE(MAX(id), 0) FROM shop_order")) {
                    rs.next();
                    first = rs.getLong(1) + 1;
                }
            }
            c.setAutoCommit(false); // from here on, every statement runs in an explicit transaction

            for (long orderId = first; orderId < first + n; orderId++) {
                long id;
                try {
                    String payload = createOrder(c, orderId, 1000 + orderId);
                    id = orderId % 2 == 1 ? enqueueMinimal(c, payload) : enqueueFull(c, orderId, payload).id();
                    c.commit();
                } catch (SQLException | RuntimeException e) {
                    c.rollback();
                    throw e;
                }
                String variant = orderId % 2 == 1 ? "minimal" : "full";
                System.out.println("committed " + id + " order=" + orderId + " variant=" + variant);
            }

            // A retried request for an order that already has its message: same id, no new row.
            long retried = first % 2 == 0 ? first : first + 1; // the first "full" order
            if (retried < first + n) {
                Enqueued e = enqueueFull(c, retried, "{\"order_id\": " + retried + "}");
                c.commit();
                if (e.created()) {
                    throw new IllegalStateException("retry of order " + retried + " created a second message");
                }
                System.out.println("duplicate " + e.id() + " order=" + retried);
            }

            // A failure after both inserts: the rollback undoes the order AND its message.
            long orderId = first + n;
            try {
                enqueueMinimal(c, createOrder(c, orderId, 1000 + orderId));
                throw new PaymentDeclined(orderId);
            } catch (PaymentDeclined e) {
                c.rollback();
                System.out.println("rolled-back order=" + orderId);
            }
        }
    }

    static long parsePositive(String s) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            return 0;
        }
    }
}
