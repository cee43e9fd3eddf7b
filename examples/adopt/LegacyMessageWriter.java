import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * The legacy writer of seed 001, unchanged by the adoption: it knows only its own {@code message}
 * table (topic, tag, msg_key, data, status 0 = unsent) and plain JDBC. With an `outbox adopt`
 * bridge installed on that table, each committed row is delivered by `outbox relay` and its
 * status becomes 1; a rolled-back row never is. See docs/adopt.md.
 *
 * <pre>
 * javac -d out LegacyMessageWriter.java
 * java -cp out:/usr/share/java/postgresql.jar LegacyMessageWriter \
 *     'jdbc:postgresql://127.0.0.1:5432/DB?user=postgres' N
 * java -cp out:/usr/share/java/mariadb-java-client.jar LegacyMessageWriter \
 *     'jdbc:mariadb://127.0.0.1:3306/DB?user=root' N
 * </pre>
 *
 * Commits N orders, each ONE transaction holding the business write (here only the message row,
 * as in the article's MessageService) and prints {@code committed <legacy id> key=<key>}; then
 * inserts one more row and rolls it back, printing {@code rolled-back <legacy id>}. The ids are
 * the driver's generated keys: the bridge's trigger must not change them.
 */
public final class LegacyMessageWriter {
    static long insert(Connection c, String key, int n) throws SQLException {
        String sql = "INSERT INTO message (topic, tag, msg_key, data, status) VALUES (?, ?, ?, ?, 0)";
        try (PreparedStatement ps = c.prepareStatement(sql, Statement.RETURN_GENERATED_KEYS)) {
            ps.setString(1, "order-topic");
            ps.setString(2, "paid");
            ps.setString(3, key);
            ps.setString(4, "{\"order\":" + n + "}");
            ps.executeUpdate();
            try (ResultSet rs = ps.getGeneratedKeys()) {
                if (!rs.next()) {
                    throw new SQLException("no generated key");
                }
                return rs.getLong(1);
            }
        }
    }

    public static void main(String[] args) throws SQLException {
        if (args.length != 2) {
            System.err.println("usage: LegacyMessageWriter <jdbc url> <orders>");
            System.exit(2);
        }
        int orders = Integer.parseInt(args[1]);
        try (Connection c = DriverManager.getConnection(args[0])) {
            c.setAutoCommit(false);
            for (int n = 1; n <= orders; n++) {
                String key = "order-" + (n % 3);
                long id = insert(c, key, n);
                c.commit();
                System.out.println("committed " + id + " key=" + key);
            }
            long id = insert(c, "order-x", 0);
            c.rollback();
            System.out.println("rolled-back " + id);
        }
    }
}
