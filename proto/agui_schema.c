/*
 * agui_schema.c - the field tables of the 31 AG-UI 1.0 event types.
 *
 * One closed ab__schema_t per type (reference section 2 table), each made of
 * the type's own fields, the envelope fields every event may carry
 * (reference section 1) and, on attributable events only, subagentRunId.
 * Slots name the ab_agui_info_t member a field's value is copied to.
 *
 * Invariants:
 *  1. "type" is the first field of every table (it is present in every
 *     event, so it is found with one comparison) and is AB__K_SKIP: the entry
 *     point checked it before choosing the table.
 *  2. subagentRunId is absent from the run-scoped tables (RUN_STARTED,
 *     RUN_FINISHED, RUN_ERROR, MESSAGES_SNAPSHOT), so there it is an unknown
 *     field; it is required on the three SUBAGENT_* tables.
 *  3. event_schemas[] is indexed by ab_agui_type_t; every known type has a
 *     table (checked by the unit tests through ab_agui_validate()).
 */
#include "agui_internal.h"

#define REQ  AB__F_REQ
#define OPT  0
#define NONE NULL
#define S(m) AB__SLOT(m)

/* Envelope fields of every event (BaseEvent). "type" goes first. */
#define TYPE_FIELD AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE)
#define BASE_FIELDS                                                                                \
    AB__FIELD("timestamp", AB__K_INT53, OPT, 0, NONE),                                             \
        AB__FIELD("rawEvent", AB__K_ANY_NN, OPT, 0, NONE),                                         \
        AB__FIELD("metadata", AB__K_MAP, OPT, 0, NONE)
/* Attribution of attributable events. */
#define ATTR_FIELD AB__FIELD("subagentRunId", AB__K_STR, OPT, S(subagent_run_id), NONE)

#define STR_FIELD(nm, flags, slot) AB__FIELD(nm, AB__K_STR, flags, slot, NONE)
#define MESSAGE_ID(flags)          STR_FIELD("messageId", flags, S(message_id))
#define TOOL_CALL_ID(flags)        STR_FIELD("toolCallId", flags, S(tool_call_id))
#define DELTA(flags)               STR_FIELD("delta", flags, 0)
#define USAGE_FIELD                AB__FIELD("usage", AB__K_LIST, OPT, 0, &ab__agui_token_usage)

/* Declares the field table and the schema of one event type. */
#define EVENT(id, ...)                                                                             \
    static const ab__field_t id##_fields[] = {TYPE_FIELD, __VA_ARGS__, BASE_FIELDS};               \
    static const ab__schema_t id##_schema = AB__SCHEMA(#id, id##_fields, false)

/* ---- runs and steps ----------------------------------------------------- */

EVENT(RUN_STARTED, STR_FIELD("threadId", REQ, S(thread_id)), STR_FIELD("runId", REQ, S(run_id)),
      AB__FIELD("protocolVersion", AB__K_STR, AB__F_REQ_STRICT | AB__F_VAL_SLOT,
                S(protocol_version), NONE),
      STR_FIELD("parentRunId", OPT, S(parent_run_id)),
      AB__FIELD("input", AB__K_OBJ, AB__F_VAL_SLOT, S(input), &ab__agui_run_input));
EVENT(RUN_FINISHED, STR_FIELD("threadId", REQ, S(thread_id)), STR_FIELD("runId", REQ, S(run_id)),
      AB__FIELD("outcome", AB__K_UNION, OPT, 0, &ab__agui_run_outcome),
      AB__FIELD("result", AB__K_ANY_NN, OPT, 0, NONE), USAGE_FIELD);
EVENT(RUN_ERROR, STR_FIELD("message", REQ, 0), STR_FIELD("code", OPT, 0), USAGE_FIELD);
EVENT(STEP_STARTED, STR_FIELD("stepName", REQ, S(step_name)), ATTR_FIELD);
EVENT(STEP_FINISHED, STR_FIELD("stepName", REQ, S(step_name)), ATTR_FIELD);

/* ---- text messages ------------------------------------------------------ */

#define TEXT_ROLE AB__FIELD("role", AB__K_ENUM, OPT, S(role), &ab__agui_text_roles)

EVENT(TEXT_MESSAGE_START, MESSAGE_ID(REQ), TEXT_ROLE, STR_FIELD("name", OPT, S(name)), ATTR_FIELD);
EVENT(TEXT_MESSAGE_CONTENT, MESSAGE_ID(REQ), DELTA(REQ), ATTR_FIELD);
EVENT(TEXT_MESSAGE_END, MESSAGE_ID(REQ), ATTR_FIELD);
EVENT(TEXT_MESSAGE_CHUNK, MESSAGE_ID(OPT), TEXT_ROLE, DELTA(OPT), STR_FIELD("name", OPT, S(name)),
      ATTR_FIELD);

/* ---- tool calls --------------------------------------------------------- */

EVENT(TOOL_CALL_START, TOOL_CALL_ID(REQ), STR_FIELD("toolCallName", REQ, S(tool_call_name)),
      STR_FIELD("parentMessageId", OPT, S(parent_message_id)), ATTR_FIELD);
EVENT(TOOL_CALL_ARGS, TOOL_CALL_ID(REQ), DELTA(REQ), ATTR_FIELD);
EVENT(TOOL_CALL_END, TOOL_CALL_ID(REQ), ATTR_FIELD);
EVENT(TOOL_CALL_CHUNK, TOOL_CALL_ID(OPT), STR_FIELD("toolCallName", OPT, S(tool_call_name)),
      STR_FIELD("parentMessageId", OPT, S(parent_message_id)), DELTA(OPT), ATTR_FIELD);
EVENT(TOOL_CALL_RESULT, MESSAGE_ID(REQ), TOOL_CALL_ID(REQ),
      AB__FIELD("content", AB__K_CONTENT, REQ, 0, &ab__agui_content_part),
      AB__FIELD("role", AB__K_ENUM, OPT, 0, &ab__agui_tool_role), ATTR_FIELD);

/* ---- state, messages, activity ------------------------------------------ */

EVENT(STATE_SNAPSHOT, AB__FIELD("snapshot", AB__K_ANY, REQ, 0, NONE), ATTR_FIELD);
EVENT(STATE_DELTA, AB__FIELD("delta", AB__K_UNION_LIST, REQ, 0, &ab__agui_patch_op), ATTR_FIELD);
EVENT(MESSAGES_SNAPSHOT, AB__FIELD("messages", AB__K_UNION_LIST, REQ, 0, &ab__agui_message));
EVENT(ACTIVITY_SNAPSHOT, MESSAGE_ID(REQ), STR_FIELD("activityType", REQ, 0),
      AB__FIELD("content", AB__K_MAP, REQ, 0, NONE), AB__FIELD("replace", AB__K_BOOL, OPT, 0, NONE),
      ATTR_FIELD);
EVENT(ACTIVITY_DELTA, MESSAGE_ID(REQ), STR_FIELD("activityType", REQ, 0),
      AB__FIELD("patch", AB__K_UNION_LIST, REQ, 0, &ab__agui_patch_op), ATTR_FIELD);

/* ---- passthrough -------------------------------------------------------- */

EVENT(RAW, AB__FIELD("event", AB__K_ANY, REQ, 0, NONE), STR_FIELD("source", OPT, 0), ATTR_FIELD);
EVENT(CUSTOM, STR_FIELD("name", REQ, 0), AB__FIELD("value", AB__K_ANY, REQ, 0, NONE), ATTR_FIELD);

/* ---- reasoning ---------------------------------------------------------- */

EVENT(REASONING_START, MESSAGE_ID(REQ), ATTR_FIELD);
EVENT(REASONING_MESSAGE_START, MESSAGE_ID(REQ),
      AB__FIELD("role", AB__K_ENUM, REQ, 0, &ab__agui_reasoning_role), ATTR_FIELD);
EVENT(REASONING_MESSAGE_CONTENT, MESSAGE_ID(REQ), DELTA(REQ), ATTR_FIELD);
EVENT(REASONING_MESSAGE_END, MESSAGE_ID(REQ), ATTR_FIELD);
EVENT(REASONING_MESSAGE_CHUNK, MESSAGE_ID(OPT), DELTA(OPT), ATTR_FIELD);
EVENT(REASONING_END, MESSAGE_ID(REQ), ATTR_FIELD);
EVENT(REASONING_ENCRYPTED_VALUE,
      AB__FIELD("subtype", AB__K_OPEN_ENUM, REQ, 0, &ab__agui_encrypted_subtypes),
      STR_FIELD("entityId", REQ, 0), STR_FIELD("encryptedValue", REQ, 0), ATTR_FIELD);

/* ---- subagents (subagentRunId is their identity, so required) ----------- */

#define SUBAGENT_ID STR_FIELD("subagentRunId", REQ, S(subagent_run_id))

EVENT(SUBAGENT_STARTED, SUBAGENT_ID, STR_FIELD("name", REQ, S(name)),
      STR_FIELD("description", OPT, 0),
      STR_FIELD("parentSubagentRunId", OPT, S(parent_subagent_run_id)),
      STR_FIELD("parentToolCallId", OPT, 0), STR_FIELD("parentMessageId", OPT, 0));
EVENT(SUBAGENT_FINISHED, SUBAGENT_ID, AB__FIELD("result", AB__K_ANY_NN, OPT, 0, NONE),
      AB__FIELD("outcome", AB__K_UNION, OPT, 0, &ab__agui_subagent_outcome));
EVENT(SUBAGENT_ERROR, SUBAGENT_ID, STR_FIELD("message", REQ, 0), STR_FIELD("code", OPT, 0));

/* ---- index -------------------------------------------------------------- */

static const ab__schema_t *const event_schemas[AB_AGUI_TYPE_COUNT_] = {
#define AB_AGUI_SCHEMA_(e, s) [AB_AGUI_##e] = &e##_schema,
    AB_AGUI_TYPE_MAP(AB_AGUI_SCHEMA_)
#undef AB_AGUI_SCHEMA_
};

const ab__schema_t *ab__agui_event_schema(ab_agui_type_t t)
{
    return (unsigned)t < AB_AGUI_TYPE_COUNT_ ? event_schemas[t] : NULL;
}
