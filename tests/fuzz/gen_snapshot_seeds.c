/*
 * gen_snapshot_seeds.c - writes the seed corpus of tests/fuzz/fuzz_snapshot.c
 * (tests/fuzz/corpus/snapshot/seed-*) from the fixture threads
 * (tests/fixtures/threads/NAME.jsonl), so the seeds are reproducible:
 *
 *   gen_snapshot_seeds FIXTURES DIR           write every seed into DIR
 *   gen_snapshot_seeds --check FIXTURES DIR   exit 1 unless DIR holds every
 *                                             seed as generated
 *
 * For each fixture of n events and each cut k of 1, n/2 and n, the seed
 * seed-NAME-kK is the snapshot document of the first k events, as the
 * builder writes it (ab_snapshot_builder_json: what the persistence plugin
 * stores), then, when k < n, a NUL byte and the fixture's remaining lines,
 * which the harness folds into the restored snapshot; seed-NAME-kK-bin is
 * the same document in its binary stored form (ab_snapshot_builder_msgpack:
 * what the broker stores), alone. The check keeps the
 * seeds in step with the snapshot format: a format change that is not
 * followed by new seeds would leave a corpus of documents the validator
 * refuses at the first rule.
 *
 * Invariants:
 *  1. Output is a pure function of the fixtures and this file.
 *  2. Every seed's document passes ab_snapshot_parse() (text) or
 *     ab_snapshot_load() (binary).
 */
#include "agentbus/json.h"
#include "agentbus/snapshot.h"

#include <jansson.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINES 256

typedef struct fixture {
    char *text;            /* the file, lines NUL-terminated in place */
    char *line[MAX_LINES]; /* each line */
    size_t n;              /* lines */
    char thread[300];      /* threadId of the first event */
} fixture_t;

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, (cap *= 2) + 1);
            if (b == NULL)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf != NULL)
        buf[n] = '\0';
    *len = n;
    return buf;
}

static int load(const char *path, fixture_t *fx)
{
    size_t len;
    memset(fx, 0, sizeof *fx);
    if ((fx->text = read_all(path, &len)) == NULL)
        return -1;
    for (char *p = fx->text, *nl; *p != '\0' && fx->n < MAX_LINES; p = nl + 1) {
        nl = strchr(p, '\n');
        fx->line[fx->n++] = p;
        if (nl == NULL)
            break;
        *nl = '\0';
    }
    json_t *first = json_loads(fx->line[0], JSON_ALLOW_NUL, NULL);
    const char *t = json_string_value(json_object_get(json_object_get(first, "event"), "threadId"));
    snprintf(fx->thread, sizeof fx->thread, "%s", t ? t : "");
    json_decref(first);
    return fx->n > 0 && t != NULL ? 0 : -1;
}

/* Feed line @p i (commit position i + 1) to @p b. */
static int feed(ab_snapshot_builder_t *b, const char *line, size_t i, ab_doc_t *doc)
{
    json_t *env = json_loads(line, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    char *ev = json_dumps(json_object_get(env, "event"), JSON_COMPACT);
    ab_buf_t mp = AB_BUF_INIT;
    ab_error_t err = AB_ERROR_INIT;
    const ab_val_t *root = NULL;
    int rc = -1;
    ab_doc_reset(doc);
    if (ev != NULL &&
        ab_json_to_msgpack(ev, strlen(ev), 64, 1u << 20, AB_INVALID_EVENT, &mp, &err) == AB_OK &&
        ab_doc_parse(doc, mp.data, mp.len, 1u << 20, 64, AB_INVALID_EVENT, &root, &err) == AB_OK &&
        ab_snapshot_builder_feed(b, json_string_value(json_object_get(env, "run")),
                                 (uint64_t)json_integer_value(json_object_get(env, "seq")), i + 1,
                                 root, &err) == AB_OK)
        rc = 0;
    if (rc != 0)
        fprintf(stderr, "gen_snapshot_seeds: line %zu: %s\n", i + 1, err.message);
    ab_buf_free(&mp);
    free(ev);
    json_decref(env);
    return rc;
}

/* The seed of the first @p k lines of @p fx into @p out (@p binary: the stored form alone). */
static int build(const fixture_t *fx, size_t k, bool binary, ab_buf_t *out)
{
    ab_snapshot_builder_t *b = NULL;
    ab_doc_t *doc = NULL;
    ab_error_t err = AB_ERROR_INIT;
    int rc = -1;
    if (ab_doc_new(&doc) != AB_OK || ab_snapshot_builder_new(&b, fx->thread, &err) != AB_OK)
        goto done;
    for (size_t i = 0; i < k; i++)
        if (feed(b, fx->line[i], i, doc) != 0)
            goto done;
    ab_snapshot_t *s = NULL;
    if (binary) {
        if (ab_snapshot_builder_msgpack(b, UINT32_MAX, SIZE_MAX, out, &err) == AB_OK &&
            ab_snapshot_load(out->data, out->len, &s, &err) == AB_OK)
            rc = 0;
        ab_snapshot_destroy(&s);
        goto done;
    }
    if (ab_snapshot_builder_json(b, out, &err) != AB_OK ||
        ab_snapshot_parse((const char *)out->data, out->len, &s, &err) != AB_OK)
        goto done;
    ab_snapshot_destroy(&s);
    rc = 0;
    for (size_t i = k; rc == 0 && i < fx->n; i++)
        if (ab_buf_append(out, i == k ? "\0" : "\n", 1) != AB_OK ||
            ab_buf_append(out, fx->line[i], strlen(fx->line[i])) != AB_OK)
            rc = -1;
done:
    if (rc != 0 && err.message[0] != '\0')
        fprintf(stderr, "gen_snapshot_seeds: %s\n", err.message);
    ab_snapshot_builder_destroy(&b);
    ab_doc_destroy(&doc);
    return rc;
}

/* Write @p b to @p path, or with @p check compare it with the file. */
static int emit(const char *path, const ab_buf_t *b, int check)
{
    if (!check) {
        FILE *f = fopen(path, "wb");
        int ok = f != NULL && fwrite(b->data, 1, b->len, f) == b->len;
        return (f != NULL && fclose(f) == 0 && ok) ? 0 : -1;
    }
    size_t len;
    char *have = read_all(path, &len);
    int same = have != NULL && len == b->len && memcmp(have, b->data, len) == 0;
    free(have);
    if (!same)
        fprintf(stderr, "gen_snapshot_seeds: %s is missing or differs (regenerate the seeds)\n",
                path);
    return same ? 0 : -1;
}

/* Every seed of fixture @p name (without ".jsonl"). */
static int one_fixture(const char *fixtures, const char *name, const char *dir, int check,
                       int *count)
{
    char path[4096];
    fixture_t fx;
    snprintf(path, sizeof path, "%s/%s.jsonl", fixtures, name);
    if (load(path, &fx) != 0) {
        fprintf(stderr, "gen_snapshot_seeds: cannot read %s\n", path);
        free(fx.text);
        return -1;
    }
    const size_t cuts[] = {1, fx.n / 2, fx.n};
    int rc = 0;
    for (size_t c = 0; rc == 0 && c < 2 * (sizeof cuts / sizeof cuts[0]); c++) {
        ab_buf_t b = AB_BUF_INIT;
        bool bin = c >= sizeof cuts / sizeof cuts[0];
        size_t k = cuts[c % (sizeof cuts / sizeof cuts[0])];
        snprintf(path, sizeof path, "%s/seed-%s-k%zu%s", dir, name, k, bin ? "-bin" : "");
        rc = build(&fx, k, bin, &b) == 0 && emit(path, &b, check) == 0 ? 0 : -1;
        *count += rc == 0;
        ab_buf_free(&b);
    }
    free(fx.text);
    return rc;
}

int main(int argc, char **argv)
{
    int check = argc == 4 && strcmp(argv[1], "--check") == 0;
    if (argc != 3 && !check) {
        fprintf(stderr, "usage: gen_snapshot_seeds [--check] FIXTURES DIR\n");
        return 2;
    }
    const char *fixtures = argv[check + 1], *dir = argv[check + 2];
    DIR *d = opendir(fixtures);
    if (d == NULL) {
        fprintf(stderr, "gen_snapshot_seeds: cannot open %s\n", fixtures);
        return 1;
    }
    int count = 0, rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l <= 6 || strcmp(e->d_name + l - 6, ".jsonl") != 0)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(l - 6), e->d_name);
        rc = one_fixture(fixtures, name, dir, check, &count);
    }
    closedir(d);
    if (rc != 0 || count == 0)
        return 1;
    printf("gen_snapshot_seeds: %d seeds %s\n", count, check ? "match" : "written");
    return 0;
}
