/*
 * agui_internal.h - private schema model of the AG-UI 1.0 validator.
 *
 * The validator is data driven: every object the protocol describes (the 31
 * events, RunAgentInput, Message variants, ContentPart, PartSource, Interrupt,
 * ResumeEntry, TokenUsage, Tool, Context, ToolCall, JSON Patch operations,
 * outcomes) is an ab__schema_t: a const table of fields, each with its wire
 * name, precomputed length, kind and flags. One generic walker (agui_walk.c)
 * checks a map against a schema in a single pass over the map's pairs.
 * Discriminated unions (outcomes, messages, content parts, sources, patch
 * operations) are ab__union_t: a discriminator member and one schema per
 * value.
 *
 * Files: agui.c (entry point, type names), agui_walk.c (the walker),
 * agui_schema.c (the 31 event tables), agui_nested.c (nested types).
 * docs/VALIDATION.md describes the rules these tables encode.
 */
#ifndef AGENTBUS_AGUI_INTERNAL_H
#define AGENTBUS_AGUI_INTERNAL_H

#include "agentbus/agui.h"

#include <stddef.h>

/* What a field's value must be. */
typedef enum ab__kind {
    AB__K_SKIP = 0,   /* already checked (discriminator, event "type") */
    AB__K_STR,        /* string */
    AB__K_BOOL,       /* boolean */
    AB__K_INT53,      /* integer within +-(2^53-1) (timestamp) */
    AB__K_COUNT,      /* integer within 0..2^53-1 (token counts) */
    AB__K_ANY,        /* any JSON value, null included (required payloads) */
    AB__K_ANY_NN,     /* any JSON value except null */
    AB__K_MAP,        /* open object: any keys, any values (metadata) */
    AB__K_PTR,        /* string matching ^(/([^/~]|~[01])*)*$ (JSON Pointer) */
    AB__K_ENUM,       /* string in aux (ab__enum_t); anything else is fatal */
    AB__K_OPEN_ENUM,  /* string in aux; unknown value = unknown union member */
    AB__K_STR_LIST,   /* array of strings */
    AB__K_OBJ,        /* object checked against aux (ab__schema_t) */
    AB__K_LIST,       /* array of objects checked against aux (ab__schema_t) */
    AB__K_UNION,      /* object discriminated by aux (ab__union_t) */
    AB__K_UNION_LIST, /* array of such objects */
    AB__K_CONTENT,    /* string, or array of objects of union aux */
} ab__kind_t;

/* Field flags. */
enum {
    AB__F_REQ = 1u << 0,        /* required in both modes */
    AB__F_REQ_STRICT = 1u << 1, /* required in strict mode only */
    AB__F_NONEMPTY = 1u << 2,   /* array needs at least one item */
    AB__F_VAL_SLOT = 1u << 3,   /* slot holds a const ab_val_t *, not an ab_str_t */
};

/* A string with its precomputed length. */
typedef struct ab__name {
    const char *s;
    uint8_t len;
} ab__name_t;

#define AB__NAME(lit)                                                                              \
    {                                                                                              \
        lit, (uint8_t)(sizeof(lit) - 1)                                                            \
    }

/* A closed set of string values; `list` is the human-readable list. */
typedef struct ab__enum {
    const ab__name_t *names;
    uint8_t n;
    const char *list;
} ab__enum_t;

/*
 * One described field. `slot` is offsetof(ab_agui_info_t, member) of the
 * info member the value is copied to, or 0 for none (offset 0 is `type`,
 * which is never a slot).
 */
typedef struct ab__field {
    const char *name;
    uint8_t len;
    uint8_t kind;
    uint8_t flags;
    uint16_t slot;
    const void *aux;
} ab__field_t;

#define AB__FIELD(nm, kind, flags, slot, aux)                                                      \
    {                                                                                              \
        nm, (uint8_t)(sizeof(nm) - 1), (uint8_t)(kind), (uint8_t)(flags), (uint16_t)(slot), aux    \
    }
#define AB__SLOT(member) offsetof(ab_agui_info_t, member)

/* A described object. Closed unless `open` (then unknown members pass). */
typedef struct ab__schema {
    const char *name;
    const ab__field_t *fields;
    uint8_t n;
    bool open;
} ab__schema_t;

#define AB__SCHEMA(nm, tbl, is_open)                                                               \
    {                                                                                              \
        nm, tbl, (uint8_t)(sizeof(tbl) / sizeof(tbl[0])), is_open                                  \
    }

/*
 * A discriminated union. `set` lists the discriminator values; variants[i]
 * is the schema for set->names[i]. `closed`: an unknown value is fatal in
 * both modes (a closed leaf enum such as the message role); otherwise it is
 * an unknown union member (strict: error, lenient: warning). `outcomes`,
 * when set, maps each variant to the outcome kind stored in info->outcome.
 */
typedef struct ab__union {
    ab__name_t key;
    const char *what;
    const ab__enum_t *set;
    const ab__schema_t *const *variants;
    const ab_agui_outcome_t *outcomes;
    bool closed;
} ab__union_t;

/* A position in the event, as a chain of stack frames; rendered on error only. */
typedef struct ab__path {
    const struct ab__path *up;
    const char *key; /* NULL: array index */
    uint32_t klen;
    size_t idx;
} ab__path_t;

/* State of one ab_agui_validate() call. */
typedef struct ab__ctx {
    bool strict;
    ab_agui_warn_cb warn;
    void *ud;
    ab_error_t *err;
    ab_agui_info_t *info; /* scratch copy; handed out only on AB_OK */
} ab__ctx_t;

/* ---- agui_walk.c ------------------------------------------------------- */

/** Check the map @p m against @p s; @p at is its position (NULL = root). */
ab_status_t ab__agui_check_object(ab__ctx_t *c, const ab_val_t *m, const ab__schema_t *s,
                                  const ab__path_t *at);

/** Record AB_INVALID_EVENT at @p at (first error wins). @return AB_INVALID_EVENT. */
ab_status_t ab__agui_fail(ab__ctx_t *c, const ab__path_t *at, const char *fmt, ...) AB_PRINTF(3, 4);

/** Report unknown material at @p at: strict error, lenient warning (AB_OK). */
ab_status_t ab__agui_unknown(ab__ctx_t *c, const ab__path_t *at, const char *fmt, ...)
    AB_PRINTF(3, 4);

/* ---- agui_schema.c / agui_nested.c ------------------------------------- */

/** Schema of a known event type (t in 1..AB_AGUI_TYPE_COUNT_-1). */
const ab__schema_t *ab__agui_event_schema(ab_agui_type_t t);

extern const ab__enum_t ab__agui_text_roles;
extern const ab__enum_t ab__agui_tool_role;
extern const ab__enum_t ab__agui_reasoning_role;
extern const ab__enum_t ab__agui_encrypted_subtypes;
extern const ab__union_t ab__agui_run_outcome;
extern const ab__union_t ab__agui_subagent_outcome;
extern const ab__union_t ab__agui_message;
extern const ab__union_t ab__agui_content_part;
extern const ab__union_t ab__agui_patch_op;
extern const ab__schema_t ab__agui_run_input;
extern const ab__schema_t ab__agui_token_usage;

#endif /* AGENTBUS_AGUI_INTERNAL_H */
