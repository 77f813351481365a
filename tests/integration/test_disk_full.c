/*
 * test_disk_full.c - a real broker whose data directory is on a small tmpfs
 * the test mounts (issue 6):
 *  - publishing until the filesystem is full: every event is either
 *    accepted (and recorded) or, once the disk is full, rejected with the
 *    retryable `unavailable` whose message says the disk is full; a group is
 *    rejected whole, and it stays rejected while the disk stays full;
 *  - while full, the broker stays up, answers ping and replays committed
 *    events; a producer (client library) gets the retryable error and keeps
 *    its outbox;
 *  - space is given back (remount with a bigger size) and, without a
 *    restart, the same events are accepted and publishing continues past the
 *    old size; the producer's flush succeeds;
 *  - every acknowledged event is stored exactly once, at the position its
 *    acknowledgement named, with the bytes sent, each run contiguous from
 *    seq 1: checked by replay on the running broker and after a restart.
 *
 * Mounting needs root (CAP_SYS_ADMIN); without it the test is skipped with
 * a message saying why. Teardown always stops the broker and unmounts (lazily
 * when still busy). Every wait is bounded; the whole test takes a few
 * seconds (DF_BUDGET_MS is its hard bound).
 */
#include "testutil.h"

#include "broker_proc.h"

#include "agentbus/producer.h"

#include <ctype.h>
#include <sys/mount.h>

#define DF_SMALL "size=4m,mode=0700"
#define DF_BIG   "size=64m,mode=0700"
#define DF_BATCH 64    /* events per publish */
#define DF_PAD   1500  /* filler bytes per event: ~1.6 KiB envelopes */
#define DF_MAXEV 12000 /* far more than 4 MiB can hold */
#define DF_MORE  2500  /* events published after recovery (> the old size) */
/* The producer's batch is as big as r1's refused one and also creates a run:
 * it needs strictly more space than the refused commit, so it cannot fit in
 * whatever that failed attempt left allocated in the WAL. */
#define DF_PROD_EV   DF_BATCH
#define DF_BUDGET_MS 50000

typedef struct df {
    char mnt[64];
    char data[96];
    bool mounted;
    int mount_errno;
    bool available;
    bp_t bp;
    ab_conn_t *c;
    ab_doc_t *doc, *edoc;
    ab_producer_t *prod;
    ab_buf_t *evs; /* envelope of seq i + 1 of run "r1" (built on demand) */
    uint64_t *pos; /* acknowledged position of seq i + 1 (0 = not acknowledged) */
    uint64_t nbuilt;
    uint64_t acked; /* run r1: seqs 1..acked are acknowledged */
    long t0;
} df_t;

static int df_setup(void **state)
{
    df_t *d = calloc(1, sizeof(*d));
    *state = d;
    if (d == NULL)
        return -1;
    d->t0 = ab__mono_ms();
    d->evs = calloc(DF_MAXEV, sizeof(*d->evs));
    d->pos = calloc(DF_MAXEV, sizeof(*d->pos));
    if (d->evs == NULL || d->pos == NULL || ab_doc_new(&d->doc) != AB_OK ||
        ab_doc_new(&d->edoc) != AB_OK)
        return -1;
    snprintf(d->mnt, sizeof(d->mnt), "/tmp/agentbus-df-XXXXXX");
    if (mkdtemp(d->mnt) == NULL)
        return -1;
    snprintf(d->data, sizeof(d->data), "%s/data", d->mnt);
    d->available = bp_available();
    if (mount("tmpfs", d->mnt, "tmpfs", MS_NOSUID | MS_NODEV, DF_SMALL) == 0)
        d->mounted = true;
    else
        d->mount_errno = errno;
    return 0;
}

/* Whatever happened: stop the broker, unmount (lazily if busy), remove the mount point. */
static int df_teardown(void **state)
{
    df_t *d = *state;
    if (d == NULL)
        return 0;
    ab_producer_destroy(&d->prod);
    ab_conn_destroy(&d->c);
    bp_cleanup(&d->bp);
    if (d->mounted && umount2(d->mnt, 0) != 0) {
        fprintf(stderr, "test_disk_full: umount %s: %s; detaching lazily\n", d->mnt,
                strerror(errno));
        if (umount2(d->mnt, MNT_DETACH) != 0)
            fprintf(stderr, "test_disk_full: lazy umount %s: %s\n", d->mnt, strerror(errno));
    }
    if (d->mnt[0])
        rmdir(d->mnt);
    for (size_t i = 0; d->evs != NULL && i < DF_MAXEV; i++)
        ab_buf_free(&d->evs[i]);
    free(d->evs);
    free(d->pos);
    ab_doc_destroy(&d->doc);
    ab_doc_destroy(&d->edoc);
    free(d);
    return 0;
}

static void df_check_budget(const df_t *d, const char *where)
{
    if (ab__mono_ms() - d->t0 > DF_BUDGET_MS)
        fail_msg("%s: the test ran over its %d ms budget", where, DF_BUDGET_MS);
}

/* Case-insensitive substring test (strcasestr is a GNU extension). */
static bool has_word(const char *s, const char *word)
{
    size_t n = strlen(word);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && tolower((unsigned char)s[i]) == word[i])
            i++;
        if (i == n)
            return true;
    }
    return false;
}

/* Envelopes of run r1 up to seq @p upto (a run that never ends, ~1.6 KiB each). */
static void df_build(df_t *d, uint64_t upto)
{
    char body[DF_PAD + 256];
    for (; d->nbuilt < upto; d->nbuilt++) {
        uint64_t seq = d->nbuilt + 1;
        it_body(body, sizeof(body), "tdf", "r1", seq, 0, DF_PAD);
        ab_error_t err = AB_ERROR_INIT;
        if (ab_envelope_json(&d->evs[seq - 1], 1, "tdf", "r1", seq, 1, body, &err) != AB_OK)
            fail_msg("envelope %llu: %s", (unsigned long long)seq, err.message);
    }
}

/* The answer to one publish: the whole batch accepted or the whole batch rejected. */
typedef enum { DF_ACCEPTED, DF_REJECTED } df_outcome_t;

/*
 * Publish r1's seqs [acked + 1, acked + n]. Accepted events are recorded
 * (positions strictly increasing); a rejection must be the retryable
 * `unavailable` of a full disk, copied into @p rej.
 */
static df_outcome_t df_publish(df_t *d, uint32_t n, ab_error_t *rej)
{
    uint64_t first = d->acked + 1;
    assert_true(first + n - 1 <= DF_MAXEV);
    df_build(d, first + n - 1);
    const ab_result_t *res = NULL;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_publish(d->c, &d->evs[first - 1], n, d->doc, &res, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("publish of seq %llu..: %s: %s", (unsigned long long)first,
                 ab_status_name(err.code), err.message);
    size_t accepted = 0;
    uint64_t prev = first > 1 ? d->pos[first - 2] : 0;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(res[i].seq, first + i);
        if (res[i].status == AB_RESULT_ACCEPTED) {
            assert_true(res[i].pos > prev);
            prev = d->pos[first - 1 + i] = res[i].pos;
            accepted++;
            continue;
        }
        if (res[i].status != AB_RESULT_REJECTED || res[i].error == NULL)
            fail_msg("seq %llu: status %d", (unsigned long long)(first + i), (int)res[i].status);
        *rej = *res[i].error;
        if (rej->code != AB_UNAVAILABLE || !rej->retryable || !has_word(rej->message, "full"))
            fail_msg("seq %llu rejected with %s%s: %s (want retryable unavailable, disk full)",
                     (unsigned long long)(first + i), ab_status_name(rej->code),
                     rej->retryable ? " (retryable)" : "", rej->message);
        assert_int_equal(res[i].pos, 0);
    }
    if (accepted != 0 && accepted != n)
        fail_msg("a publish of %u events was half accepted (%zu)", n, accepted);
    if (accepted == n)
        d->acked += n;
    return accepted == n ? DF_ACCEPTED : DF_REJECTED;
}

/* A replay checked against what was acknowledged. */
typedef struct df_seen {
    const df_t *d;
    ab_doc_t *doc;
    uint64_t r1_next; /* next expected seq of r1 */
    uint64_t r2_next; /* next expected seq of r2 */
    uint64_t last_pos;
    uint64_t total;
} df_seen_t;

static ab_status_t df_row(void *ud, const ab_stamp_t *st, const uint8_t *bytes, size_t len,
                          ab_error_t *err)
{
    df_seen_t *s = ud;
    ab_event_t ev;
    assert_int_equal(ab_event_decode(s->doc, bytes, len, NULL, &ev, err), AB_OK);
    assert_true(st->pos > s->last_pos); /* each position once, in order */
    s->last_pos = st->pos;
    s->total++;
    if (ev.run.len == 2 && memcmp(ev.run.ptr, "r2", 2) == 0) {
        assert_int_equal(ev.seq, s->r2_next++);
        return AB_OK;
    }
    assert_true(ev.run.len == 2 && memcmp(ev.run.ptr, "r1", 2) == 0);
    assert_int_equal(ev.seq, s->r1_next++); /* contiguous, each once */
    if (ev.seq > s->d->acked)
        fail_msg("replay has r1 seq %llu, never acknowledged (acked 1..%llu)",
                 (unsigned long long)ev.seq, (unsigned long long)s->d->acked);
    const ab_buf_t *want = &s->d->evs[ev.seq - 1];
    assert_int_equal(st->pos, s->d->pos[ev.seq - 1]);
    assert_int_equal(len, want->len);
    assert_memory_equal(bytes, want->data, len);
    return AB_OK;
}

/* Replay everything; r1 must be exactly 1..acked, r2 exactly 1..@p r2_events. */
static void df_verify(df_t *d, ab_conn_t *c, uint64_t r2_events, const char *when)
{
    ab_msg_t q = {.op = AB_OP_REPLAY};
    q.u.replay.scope = AB_REPLAY_ALL;
    ab_replay_end_t end;
    ab_error_t err = AB_ERROR_INIT;
    df_seen_t s = {.d = d, .doc = d->edoc, .r1_next = 1, .r2_next = 1};
    if (ab_conn_replay(c, &q, df_row, &s, d->doc, &end, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("replay %s: %s: %s", when, ab_status_name(err.code), err.message);
    if (s.r1_next - 1 != d->acked || s.r2_next - 1 != r2_events)
        fail_msg("replay %s: r1 has %llu events (acked %llu), r2 %llu (acked %llu)", when,
                 (unsigned long long)(s.r1_next - 1), (unsigned long long)d->acked,
                 (unsigned long long)(s.r2_next - 1), (unsigned long long)r2_events);
    assert_int_equal(end.events, s.total);
    assert_int_equal(end.head_pos, s.last_pos);
    print_message("replay %s: %llu + %llu events, each once, contiguous\n", when,
                  (unsigned long long)d->acked, (unsigned long long)r2_events);
}

/* A producer (client library) on run r2 that gives up after two retries. */
static void df_producer_start(df_t *d)
{
    ab_producer_opts_t o = {.timeout_ms = 2000, .max_retries = 2, .backoff_base_ms = 10};
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_new(&d->prod, d->bp.cmd, &o, &err) != AB_OK ||
        ab_producer_claim(d->prod, "tdf", "r2", NULL, &err) != AB_OK)
        fail_msg("producer: %s: %s", ab_status_name(err.code), err.message);
}

/* While the disk is full: the producer's flush fails retryable, the outbox is kept. */
static void df_producer_full(df_t *d)
{
    char body[DF_PAD + 256];
    ab_error_t err = AB_ERROR_INIT;
    for (uint64_t seq = 1; seq <= DF_PROD_EV; seq++) {
        it_body(body, sizeof(body), "tdf", "r2", seq, 0, DF_PAD);
        if (ab_producer_publish_json(d->prod, body, strlen(body), &err) != AB_OK)
            fail_msg("producer publish: %s: %s", ab_status_name(err.code), err.message);
    }
    ab_status_t st = ab_producer_flush(d->prod, 3000, &err);
    if (st != AB_UNAVAILABLE || !err.retryable)
        fail_msg("producer flush on a full disk: %s: %s (want retryable unavailable)",
                 ab_status_name(st), err.message);
    ab_producer_stats_t ps = ab_producer_stats(d->prod);
    assert_int_equal(ps.outbox, DF_PROD_EV);
    assert_int_equal(ps.acked, 0);
    assert_true(ps.retries >= 1);
}

/* Fill the disk: publish until a batch is refused; then it stays refused. */
static void df_fill(df_t *d)
{
    ab_error_t rej = AB_ERROR_INIT;
    while (df_publish(d, DF_BATCH, &rej) == DF_ACCEPTED) {
        df_check_budget(d, "filling the disk");
        if (d->acked + DF_BATCH > DF_MAXEV)
            fail_msg("the 4 MiB filesystem took %llu events without filling",
                     (unsigned long long)d->acked);
    }
    print_message("disk full after %llu acknowledged events: %s: %s\n",
                  (unsigned long long)d->acked, ab_status_name(rej.code), rej.message);
    assert_true(d->acked > 0);
    uint64_t before = d->acked;
    for (int i = 0; i < 3; i++)
        if (df_publish(d, DF_BATCH, &rej) != DF_REJECTED)
            fail_msg("a retry was accepted although the disk is still full");
    assert_int_equal(d->acked, before);
}

/* While full: the broker is up, answers ping with the last acknowledged position. */
static void df_check_alive(df_t *d)
{
    assert_int_equal(waitpid(d->bp.pid, &d->bp.status, WNOHANG), 0);
    ab_pong_t pong;
    ab_error_t err = AB_ERROR_INIT;
    if (ab_conn_ping(d->c, d->doc, &pong, IT_TIMEOUT, &err) != AB_OK)
        fail_msg("ping while full: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(pong.head_pos, d->pos[d->acked - 1]);
    assert_int_equal(pong.instance.len, strlen(d->bp.instance));
    assert_memory_equal(pong.instance.ptr, d->bp.instance, pong.instance.len);
}

/* Space is back: the same events are accepted, and many more. */
static void df_recover(df_t *d)
{
    if (mount("tmpfs", d->mnt, "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV, DF_BIG) != 0)
        fail_msg("remount %s with %s: %s", d->mnt, DF_BIG, strerror(errno));
    ab_error_t rej = AB_ERROR_INIT;
    uint64_t full_at = d->acked;
    if (df_publish(d, DF_BATCH, &rej) != DF_ACCEPTED)
        fail_msg("still refused after the space came back: %s", rej.message);
    while (d->acked < full_at + DF_MORE) {
        df_check_budget(d, "publishing after recovery");
        if (df_publish(d, DF_BATCH, &rej) != DF_ACCEPTED)
            fail_msg("refused at seq %llu after recovery: %s", (unsigned long long)d->acked + 1,
                     rej.message);
    }
    ab_error_t err = AB_ERROR_INIT;
    if (ab_producer_flush(d->prod, 5000, &err) != AB_OK)
        fail_msg("producer flush after recovery: %s: %s", ab_status_name(err.code), err.message);
    assert_int_equal(ab_producer_acked_seq(d->prod), DF_PROD_EV);
    assert_int_equal(ab_producer_stats(d->prod).outbox, 0);
    assert_string_equal(ab_conn_instance(d->c), d->bp.instance); /* the same broker */
    print_message("recovered without a restart: %llu events acknowledged in all on r1\n",
                  (unsigned long long)d->acked);
}

/* Set when the test was skipped: main() then exits 77, which ctest reports as "Skipped". */
static int df_skipped;

static void test_disk_full(void **state)
{
    df_t *d = *state;
    if (!d->available) {
        print_message("agentbus has no broker command yet: skipped\n");
        skip();
    }
    if (!d->mounted) {
        print_message("test_disk_full SKIPPED: cannot mount a tmpfs on %s (%s); the full-disk "
                      "test needs root or CAP_SYS_ADMIN\n",
                      d->mnt, strerror(d->mount_errno));
        df_skipped = 1;
        skip();
    }
    assert_int_equal(bp_start(&d->bp, d->data, NULL), 0);
    d->c = it_connect(&d->bp);
    df_producer_start(d);

    df_fill(d);
    df_check_alive(d);
    df_verify(d, d->c, 0, "while the disk is full");
    df_producer_full(d);

    df_recover(d);
    df_verify(d, d->c, DF_PROD_EV, "after recovery");

    ab_producer_destroy(&d->prod);
    ab_conn_destroy(&d->c);
    assert_int_equal(bp_stop(&d->bp), 0);
    assert_int_equal(bp_restart(&d->bp), 0);
    d->c = it_connect(&d->bp);
    df_verify(d, d->c, DF_PROD_EV, "after a restart");
    ab_conn_destroy(&d->c);
    assert_int_equal(bp_stop(&d->bp), 0);
    df_check_budget(d, "the end");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disk_full, df_setup, df_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc == 0 && df_skipped ? 77 : rc;
}
