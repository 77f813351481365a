/*
 * reducer_custom.c - AgentKit projections carried in AG-UI CUSTOM events
 * (names and value shapes: docs/REDUCER.md, "AgentKit CUSTOM events").
 *
 * Invariants:
 *  1. Only the names of kit_defs are folded; any other CUSTOM name is
 *     ignored silently (AG-UI 1.0: unknown CUSTOM names are legal traffic).
 *  2. A value is checked completely before the projection is touched: an
 *     object with its id, its required string members when it creates an
 *     item (an update of an existing id needs only the id), references
 *     ({kind, id, scope?, source?}, all strings) where references go, and
 *     for widgets an "actions" array of {id, label} with unique ids. A value
 *     that fails is skipped with a warning.
 *  3. Upserts merge shallowly into the item with the same id (last write
 *     wins per member); interactions are append-only.
 */
#include "reducer_internal.h"

#include <string.h>

#define KIT_APPEND (-1)

typedef struct kit_def {
    const char *name;     /* CUSTOM name */
    int coll;             /* RD_* collection, or KIT_APPEND (interactions) */
    const char *strs[4];  /* required string members (first = the id) */
    const char *refs[3];  /* members that hold one reference when present */
    const char *need_ref; /* a reference member that is required */
} kit_def_t;

static const kit_def_t kit_defs[] = {
    {"agentkit.task", RD_TASKS, {"id", "title", "status"}, {"assignee", "owner"}, NULL},
    {"agentkit.roster", RD_ROSTER, {"agentId", "state"}, {"agent"}, NULL},
    {"agentkit.interaction", KIT_APPEND, {"id", "action"}, {"actor", "target"}, "actor"},
    {"agentkit.artifact", RD_ARTIFACTS, {"id", "kind", "title"}, {"source"}, NULL},
    {"agentkit.suggestion", RD_SUGGESTIONS, {"id", "label"}, {"target"}, NULL},
    {"agentkit.widget", RD_WIDGETS, {"id", "kind"}, {"subject"}, NULL},
};

static bool is_str(const json_t *o, const char *key)
{
    return json_is_string(json_object_get(o, key));
}

/* A portable reference: {kind, id, scope?, source?}, all strings. */
static bool ref_ok(const json_t *ref)
{
    if (!json_is_object(ref) || !is_str(ref, "kind") || !is_str(ref, "id"))
        return false;
    const json_t *scope = json_object_get(ref, "scope"), *src = json_object_get(ref, "source");
    return (!scope || json_is_string(scope)) && (!src || json_is_string(src));
}

/* Widget actions: an array of {id, label} with unique ids. */
static const char *actions_check(const json_t *actions)
{
    if (!actions)
        return NULL;
    if (!json_is_array(actions))
        return "'actions' is not an array";
    for (size_t i = 0; i < json_array_size(actions); i++) {
        const json_t *a = json_array_get(actions, i);
        if (!is_str(a, "id") || !is_str(a, "label"))
            return "an action lacks a string 'id' or 'label'";
        const char *id = json_string_value(json_object_get(a, "id"));
        for (size_t j = 0; j < i; j++)
            if (strcmp(id, json_string_value(json_object_get(json_array_get(actions, j), "id"))) ==
                0)
                return "duplicate action id";
    }
    return NULL;
}

static const char *kit_check_refs(const kit_def_t *d, const json_t *v);

/* NULL when @p v is a valid value for @p d, else what is wrong. */
static const char *kit_check(const kit_def_t *d, const json_t *v, const rd_coll_t *c)
{
    if (!json_is_object(v))
        return "value is not an object";
    const json_t *id = json_object_get(v, d->strs[0]);
    if (!json_is_string(id))
        return "the id member is missing or not a string";
    if (c && ab__rd_find(c, json_string_value(id), json_string_length(id)))
        return kit_check_refs(d, v); /* an update: only the id is required */
    for (size_t i = 0; i < 4 && d->strs[i]; i++)
        if (!is_str(v, d->strs[i]))
            return "a required string member is missing";
    if (d->need_ref && !json_object_get(v, d->need_ref))
        return "a required reference is missing";
    return kit_check_refs(d, v);
}

/* References, "refs" and widget actions of @p v. */
static const char *kit_check_refs(const kit_def_t *d, const json_t *v)
{
    for (size_t i = 0; i < 3 && d->refs[i]; i++) {
        const json_t *ref = json_object_get(v, d->refs[i]);
        if (ref && !ref_ok(ref))
            return "a reference is not {kind, id, scope?, source?}";
    }
    const json_t *refs = json_object_get(v, "refs");
    if (refs && !json_is_array(refs))
        return "'refs' is not an array";
    for (size_t i = 0; i < json_array_size(refs); i++)
        if (!ref_ok(json_array_get(refs, i)))
            return "an entry of 'refs' is not {kind, id, scope?, source?}";
    return strcmp(d->name, "agentkit.widget") == 0 ? actions_check(json_object_get(v, "actions"))
                                                   : NULL;
}

static void kit_fold(ab_reducer_t *r, const kit_def_t *d, json_t *v)
{
    if (d->coll == KIT_APPEND) {
        if (json_array_append(json_object_get(r->root, "interactions"), v) != 0)
            r->oom = true;
        return;
    }
    rd_coll_t *c = &r->coll[d->coll];
    json_t *id = json_object_get(v, d->strs[0]);
    json_t *item = ab__rd_find(c, json_string_value(id), json_string_length(id));
    if (!item) {
        ab__rd_add(r, c, json_string_value(id), json_string_length(id), json_incref(v));
        return;
    }
    if (json_object_update(item, v) != 0)
        r->oom = true;
}

void ab__rd_custom(ab_reducer_t *r, const ab_val_t *ev)
{
    size_t n;
    const char *name = ab__rd_str(ev, "name", &n);
    const ab_val_t *value = ab_val_get(ev, "value");
    if (!name || !value)
        return;
    const kit_def_t *d = NULL;
    for (size_t i = 0; i < sizeof kit_defs / sizeof kit_defs[0]; i++)
        if (strlen(kit_defs[i].name) == n && memcmp(kit_defs[i].name, name, n) == 0)
            d = &kit_defs[i];
    if (!d)
        return;
    json_t *v = ab__val_to_jansson(value);
    if (!v) {
        r->oom = true;
        return;
    }
    const char *why = kit_check(d, v, d->coll == KIT_APPEND ? NULL : &r->coll[d->coll]);
    if (why)
        ab__rd_warn(r, "CUSTOM %s skipped: %s", d->name, why);
    else
        kit_fold(r, d, v);
    json_decref(v);
}
