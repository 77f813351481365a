/*
 * test_readonly_db.c - a broker on a data directory that is writable but
 * whose agentbus.db is not: it must refuse at start (exit 1, a message that
 * names the file and says it is not writable) instead of saying `ready` and
 * failing every claim. The file stays byte-for-byte unchanged and no WAL is
 * started; made writable again, the same directory serves its events.
 *
 * Making a file unwritable: mode 0444 for an ordinary user; root writes
 * through 0444, so as root the test sets the immutable attribute (needs
 * CAP_LINUX_IMMUTABLE and a filesystem that has it). When neither works the
 * test says why and exits 77, which ctest reports as skipped.
 */
#include "testutil.h"

#include "broker_proc.h"

#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

static int skipped; /* main() then exits 77 */

static char db_path[600];

static int set_immutable(const char *path, bool on)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int flags = 0, rc = -1;
    if (fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        rc = ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    int e = rc == 0 ? 0 : errno;
    if (fd >= 0)
        close(fd);
    return e;
}

/* Whatever happened, make the file removable again, then stop and clean up. */
static int ro_teardown(void **state)
{
    if (db_path[0]) {
        set_immutable(db_path, false);
        chmod(db_path, 0600);
    }
    return it_teardown(state);
}

static void publish_run(const bp_t *bp, ab_doc_t *doc)
{
    ab_conn_t *c = it_connect(bp);
    ab_buf_t evs[4];
    memset(evs, 0, sizeof(evs));
    for (uint64_t s = 1; s <= 4; s++)
        it_event(&evs[s - 1], "tr", "r1", s, 4, 1);
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_conn_publish(c, evs, 4, doc, &res, IT_TIMEOUT, &err), AB_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(res[i].status, AB_RESULT_ACCEPTED);
        ab_buf_free(&evs[i]);
    }
    ab_conn_destroy(&c);
}

static uint64_t last_seq(const bp_t *bp, ab_doc_t *doc)
{
    ab_conn_t *c = it_connect(bp);
    ab_run_ref_t ref = {{"tr", 2}, {"r1", 2}};
    ab_heads_t q = {.runs = &ref, .nruns = 1};
    ab_heads_reply_t hr;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_heads(c, &q, doc, &hr, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("heads: %s: %s", ab_status_name(err.code), err.message);
    uint64_t seq = hr.heads[0].last_seq;
    ab_conn_destroy(&c);
    return seq;
}

static void test_readonly_database(void **state)
{
    it_t *t = *state;
    IT_REQUIRE_BROKER(t);
    publish_run(&t->bp, t->doc);
    assert_int_equal(bp_stop(&t->bp), 0);
    snprintf(db_path, sizeof(db_path), "%s/agentbus.db", t->bp.dir);
    int e = 0;
    if (geteuid() != 0)
        e = chmod(db_path, 0444) == 0 ? 0 : errno;
    else
        e = set_immutable(db_path, true);
    if (e != 0) {
        print_message("cannot make %s unwritable (%s): skipped\n", db_path, strerror(e));
        skipped = 1;
        skip();
    }
    size_t len0 = 0, len1 = 0;
    char *before = tu_read_file(db_path, &len0);
    char out[2048];
    int rc = bp_run_second(t->bp.dir, out, sizeof(out));
    char *after = tu_read_file(db_path, &len1);
    bool same = len0 == len1 && memcmp(before, after, len0) == 0;
    free(before);
    free(after);
    if (rc != 1)
        fail_msg("broker on a read-only database exited %d (want 1): %s", rc, out);
    if (strstr(out, db_path) == NULL || strstr(out, "is not writable") == NULL)
        fail_msg("the message does not name %s as not writable: %s", db_path, out);
    if (!same)
        fail_msg("%s changed although the broker refused it", db_path);
    char wal[620];
    snprintf(wal, sizeof(wal), "%s-wal", db_path);
    struct stat sb;
    assert_int_not_equal(stat(wal, &sb), 0); /* no WAL was started */
    /* writable again: the same directory serves what it stored */
    assert_int_equal(geteuid() != 0 ? chmod(db_path, 0600) : set_immutable(db_path, false), 0);
    assert_int_equal(bp_restart(&t->bp), 0);
    assert_int_equal(last_seq(&t->bp, t->doc), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_readonly_database, it_setup, ro_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc == 0 && skipped ? 77 : rc;
}
