/*
 * test_lifecycle_streams.c - every stream under tests/fixtures/streams
 * replayed through the AG-UI run lifecycle checker the way `agentbus
 * validate --lifecycle` does (a checker per run, the thread's activity
 * messages as each checker's baseline): the valid ones pass, each invalid one
 * fails at the line, field and message its .expect file names.
 */
#include "agentbus/agui.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixtures ------------------------------------------------------------- */

#define STREAMS AB_FIXTURES_DIR "/streams"

typedef struct outcome {
    size_t line; /* 0 = all accepted */
    ab_error_t err;
} outcome_t;

/* The activity messages a stream's threads hold (R20 across runs, as validate keeps them). */
typedef struct acts {
    char thread[64][128], id[64][128];
    size_t n;
    char cur[128]; /* the current run's thread */
} acts_t;

static void acts_add(acts_t *a, const char *id, size_t len)
{
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->thread[i], a->cur) == 0 && strlen(a->id[i]) == len &&
            memcmp(a->id[i], id, len) == 0)
            return;
    assert_true(a->n < 64 && len < 128);
    snprintf(a->thread[a->n], 128, "%s", a->cur);
    memcpy(a->id[a->n], id, len);
    a->id[a->n++][len] = '\0';
}

static void acts_note(acts_t *a, const ab_agui_info_t *info)
{
    if (info->type == AB_AGUI_ACTIVITY_SNAPSHOT && info->message_id.ptr)
        acts_add(a, info->message_id.ptr, info->message_id.len);
    const ab_val_t *msgs =
        info->type == AB_AGUI_MESSAGES_SNAPSHOT ? ab_val_get(info->event, "messages") : NULL;
    bool any = false;
    for (uint32_t i = 0; msgs && i < msgs->len; i++)
        any |= ab_val_str_eq(ab_val_get(&msgs->u.items[i], "role"), "activity");
    if (!any)
        return;
    for (size_t i = a->n; i-- > 0;) /* the snapshot's activity messages are the whole set */
        if (strcmp(a->thread[i], a->cur) == 0) {
            memmove(a->thread[i], a->thread[i + 1], (a->n - i - 1) * 128);
            memmove(a->id[i], a->id[i + 1], (a->n - i - 1) * 128);
            a->n--;
        }
    for (uint32_t i = 0; i < msgs->len; i++) {
        const ab_val_t *m = &msgs->u.items[i], *id = ab_val_get(m, "id");
        if (ab_val_str_eq(ab_val_get(m, "role"), "activity") && id)
            acts_add(a, id->u.s, id->len);
    }
}

static ab_status_t acts_baseline(void *ud, ab_str_t id, ab_error_t *err)
{
    (void)err;
    const acts_t *a = ud;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->thread[i], a->cur) == 0 && strlen(a->id[i]) == id.len &&
            memcmp(a->id[i], id.ptr, id.len) == 0)
            return AB_OK;
    return AB_NOT_FOUND;
}

/* Replay a stream the way `agentbus validate --lifecycle` does (with R20 across runs). */
static outcome_t replay(const char *path)
{
    static acts_t acts;
    memset(&acts, 0, sizeof(acts));
    outcome_t o = {0, AB_ERROR_INIT};
    tu_ctx_t tu;
    tu_ctx_init(&tu);
    char *text = tu_read_file(path, NULL);
    ab_lifecycle_t *lc = NULL;
    size_t line = 0;
    for (char *s = text, *nl; s && *s; s = nl ? nl + 1 : NULL) {
        nl = strchr(s, '\n');
        if (nl)
            *nl = '\0';
        line++;
        if (*s == '\0')
            continue;
        const ab_val_t *root = tu_json(&tu, s);
        ab_agui_info_t info;
        if (ab_agui_validate(root, AB_AGUI_STRICT, NULL, NULL, &info, &o.err) == AB_OK) {
            ab_run_state_t rs = ab_lifecycle_state(lc);
            if (!lc || (info.type == AB_AGUI_RUN_STARTED &&
                        (rs == AB_RUN_FINISHED || rs == AB_RUN_ERRORED))) {
                ab_lifecycle_destroy(&lc);
                assert_int_equal(ab_lifecycle_new(&lc, NULL, 0, NULL, 0, NULL), AB_OK);
                ab_lifecycle_set_baseline(lc, acts_baseline, &acts);
            }
            if (info.type == AB_AGUI_RUN_STARTED && info.thread_id.ptr)
                snprintf(acts.cur, sizeof(acts.cur), "%.*s", (int)info.thread_id.len,
                         info.thread_id.ptr);
            if (ab_lifecycle_check(lc, &info, &o.err) == AB_OK) {
                acts_note(&acts, &info);
                continue;
            }
        }
        o.line = line;
        break;
    }
    ab_lifecycle_destroy(&lc);
    free(text);
    tu_ctx_free(&tu);
    return o;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static size_t list_streams(const char *dir, char **names, size_t max)
{
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s", dir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".jsonl") == 0 && n < max)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_names);
    return n;
}

/* 1 when the invalid stream @p name fails as its .expect file says. */
static int check_invalid(const char *name)
{
    char path[1024], exp[1024];
    snprintf(path, sizeof(path), STREAMS "/invalid/%s", name);
    snprintf(exp, sizeof(exp), STREAMS "/invalid/%.*s.expect", (int)(strlen(name) - 6), name);
    char *want = tu_read_file(exp, NULL);
    char *tab1 = strchr(want, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
    if (!tab2)
        fail_msg("%s: want LINE<TAB>PATH<TAB>MESSAGE", exp);
    *tab1 = *tab2 = '\0';
    want[strcspn(want, "\n")] = '\0';
    tab2[1 + strcspn(tab2 + 1, "\r\n")] = '\0';
    outcome_t o = replay(path);
    int ok = o.line == (size_t)strtoul(want, NULL, 10) && strcmp(o.err.field, tab1 + 1) == 0 &&
             strstr(o.err.message, tab2 + 1) != NULL;
    if (!ok)
        print_error("invalid/%s: want line %s at '%s' with '%s'; got line %zu at '%s': %s\n", name,
                    want, tab1 + 1, tab2 + 1, o.line, o.err.field, o.err.message);
    free(want);
    return ok;
}

static void test_fixture_streams(void **state)
{
    (void)state;
    char *names[256];
    size_t bad = 0, nv = list_streams(STREAMS "/valid", names, 256);
    for (size_t i = 0; i < nv; i++) {
        char path[1024];
        snprintf(path, sizeof(path), STREAMS "/valid/%s", names[i]);
        outcome_t o = replay(path);
        if (o.line) {
            print_error("valid/%s: line %zu rejected: %s (at %s)\n", names[i], o.line,
                        o.err.message, o.err.field);
            bad++;
        }
        free(names[i]);
    }
    size_t ni = list_streams(STREAMS "/invalid", names, 256);
    for (size_t i = 0; i < ni; i++) {
        bad += !check_invalid(names[i]);
        free(names[i]);
    }
    print_message("%zu valid and %zu invalid streams\n", nv, ni);
    assert_true(nv >= 10);
    assert_true(ni >= 25);
    if (bad)
        fail_msg("%zu fixture streams did not behave as expected", bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
