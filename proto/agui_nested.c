/*
 * agui_nested.c - schema tables of the AG-UI 1.0 nested types.
 *
 * RunFinishedOutcome, SubagentFinishedOutcome, Interrupt, ResumeEntry,
 * TokenUsage, Tool, Context, ToolCall/FunctionCall, the seven Message
 * variants, ContentPart, PartSource, the six JSON Patch operations and
 * RunAgentInput, as ab__schema_t / ab__union_t data for agui_walk.c.
 * Structure follows the reference (docs/VALIDATION.md cites each rule).
 *
 * Invariants:
 *  1. Every table is const data: no initialisation at run time, so
 *     validation is reentrant.
 *  2. A union's variants[] is in the same order as its set's names[].
 *  3. Only JSON Patch operations are open schemas (RFC 6902: members an
 *     operation does not define are ignored); every other object is closed.
 *  4. The discriminator of a union appears in each variant as a required
 *     AB__K_SKIP field (the walker checked it before picking the variant).
 */
#include "agui_internal.h"

#define REQ  AB__F_REQ
#define OPT  0
#define NONE NULL

/* ---- closed value sets ------------------------------------------------- */

static const ab__name_t text_role_names[] = {AB__NAME("developer"), AB__NAME("system"),
                                             AB__NAME("assistant"), AB__NAME("user")};
const ab__enum_t ab__agui_text_roles = {text_role_names, 4, "developer, system, assistant, user"};

static const ab__name_t tool_role_names[] = {AB__NAME("tool")};
const ab__enum_t ab__agui_tool_role = {tool_role_names, 1, "tool"};

static const ab__name_t reasoning_role_names[] = {AB__NAME("reasoning")};
const ab__enum_t ab__agui_reasoning_role = {reasoning_role_names, 1, "reasoning"};

static const ab__name_t subtype_names[] = {AB__NAME("tool-call"), AB__NAME("message")};
const ab__enum_t ab__agui_encrypted_subtypes = {subtype_names, 2, "tool-call, message"};

static const ab__name_t resume_status_names[] = {AB__NAME("resolved"), AB__NAME("cancelled")};
static const ab__enum_t resume_status = {resume_status_names, 2, "resolved, cancelled"};

static const ab__name_t function_names[] = {AB__NAME("function")};
static const ab__enum_t function_type = {function_names, 1, "function"};

/* ---- RunFinishedOutcome / SubagentFinishedOutcome ------------------------ */

static const ab__field_t interrupt_fields[] = {
    AB__FIELD("id", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("reason", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("message", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("toolCallId", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("responseSchema", AB__K_MAP, OPT, 0, NONE),
    AB__FIELD("expiresAt", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("metadata", AB__K_MAP, OPT, 0, NONE),
    AB__FIELD("subagentRunId", AB__K_STR, OPT, 0, NONE),
};
static const ab__schema_t interrupt_schema = AB__SCHEMA("Interrupt", interrupt_fields, false);

static const ab__field_t outcome_success_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("pendingToolCallIds", AB__K_STR_LIST, AB__F_VAL_SLOT, AB__SLOT(pending_tool_call_ids),
              NONE),
};
static const ab__field_t outcome_interrupt_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("interrupts", AB__K_LIST, REQ | AB__F_NONEMPTY | AB__F_VAL_SLOT, AB__SLOT(interrupts),
              &interrupt_schema),
};
static const ab__field_t outcome_type_only_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
};
static const ab__field_t outcome_suspended_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("interruptIds", AB__K_STR_LIST, OPT, 0, NONE),
};

static const ab__schema_t outcome_success =
    AB__SCHEMA("RunFinishedSuccessOutcome", outcome_success_fields, false);
static const ab__schema_t outcome_interrupt =
    AB__SCHEMA("RunFinishedInterruptOutcome", outcome_interrupt_fields, false);
static const ab__schema_t outcome_type_only =
    AB__SCHEMA("Outcome", outcome_type_only_fields, false);
static const ab__schema_t outcome_suspended =
    AB__SCHEMA("SubagentFinishedSuspendedOutcome", outcome_suspended_fields, false);

static const ab__name_t run_outcome_names[] = {AB__NAME("success"), AB__NAME("interrupt"),
                                               AB__NAME("cancelled")};
static const ab__enum_t run_outcome_set = {run_outcome_names, 3, "success, interrupt, cancelled"};
static const ab__schema_t *const run_outcome_variants[] = {&outcome_success, &outcome_interrupt,
                                                           &outcome_type_only};
static const ab_agui_outcome_t run_outcome_kinds[] = {AB_OUTCOME_SUCCESS, AB_OUTCOME_INTERRUPT,
                                                      AB_OUTCOME_CANCELLED};
const ab__union_t ab__agui_run_outcome = {
    AB__NAME("type"),     "outcome type",    &run_outcome_set,
    run_outcome_variants, run_outcome_kinds, false,
};

static const ab__name_t sub_outcome_names[] = {AB__NAME("success"), AB__NAME("suspended")};
static const ab__enum_t sub_outcome_set = {sub_outcome_names, 2, "success, suspended"};
static const ab__schema_t *const sub_outcome_variants[] = {&outcome_type_only, &outcome_suspended};
static const ab_agui_outcome_t sub_outcome_kinds[] = {AB_OUTCOME_SUCCESS, AB_OUTCOME_SUSPENDED};
const ab__union_t ab__agui_subagent_outcome = {
    AB__NAME("type"),     "outcome type",    &sub_outcome_set,
    sub_outcome_variants, sub_outcome_kinds, false,
};

/* ---- TokenUsage, ResumeEntry, Tool, Context, ToolCall -------------------- */

static const ab__field_t token_usage_fields[] = {
    AB__FIELD("provider", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("model", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("inputTokens", AB__K_COUNT, OPT, 0, NONE),
    AB__FIELD("outputTokens", AB__K_COUNT, OPT, 0, NONE),
    AB__FIELD("totalTokens", AB__K_COUNT, OPT, 0, NONE),
    AB__FIELD("reasoningTokens", AB__K_COUNT, OPT, 0, NONE),
    AB__FIELD("cachedInputTokens", AB__K_COUNT, OPT, 0, NONE),
    AB__FIELD("cacheWriteInputTokens", AB__K_COUNT, OPT, 0, NONE),
};
const ab__schema_t ab__agui_token_usage = AB__SCHEMA("TokenUsage", token_usage_fields, false);

static const ab__field_t resume_fields[] = {
    AB__FIELD("interruptId", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("status", AB__K_ENUM, REQ, 0, &resume_status),
    AB__FIELD("payload", AB__K_ANY_NN, OPT, 0, NONE),
    AB__FIELD("metadata", AB__K_MAP, OPT, 0, NONE),
};
static const ab__schema_t resume_schema = AB__SCHEMA("ResumeEntry", resume_fields, false);

static const ab__field_t tool_fields[] = {
    AB__FIELD("name", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("description", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("parameters", AB__K_ANY_NN, OPT, 0, NONE),
    AB__FIELD("metadata", AB__K_MAP, OPT, 0, NONE),
};
static const ab__schema_t tool_schema = AB__SCHEMA("Tool", tool_fields, false);

static const ab__field_t context_fields[] = {
    AB__FIELD("description", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("value", AB__K_STR, REQ, 0, NONE),
};
static const ab__schema_t context_schema = AB__SCHEMA("Context", context_fields, false);

static const ab__field_t function_fields[] = {
    AB__FIELD("name", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("arguments", AB__K_STR, REQ, 0, NONE),
};
static const ab__schema_t function_schema = AB__SCHEMA("FunctionCall", function_fields, false);

static const ab__field_t tool_call_fields[] = {
    AB__FIELD("id", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("type", AB__K_ENUM, REQ, 0, &function_type),
    AB__FIELD("function", AB__K_OBJ, REQ, 0, &function_schema),
    AB__FIELD("encryptedValue", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("metadata", AB__K_MAP, OPT, 0, NONE),
};
static const ab__schema_t tool_call_schema = AB__SCHEMA("ToolCall", tool_call_fields, false);

/* ---- ContentPart and PartSource ----------------------------------------- */

static const ab__field_t source_data_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("value", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("mimeType", AB__K_STR, REQ, 0, NONE),
};
static const ab__field_t source_url_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("value", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("mimeType", AB__K_STR, OPT, 0, NONE),
};
static const ab__field_t source_file_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("value", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("provider", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("mimeType", AB__K_STR, OPT, 0, NONE),
};
static const ab__schema_t source_data = AB__SCHEMA("DataSource", source_data_fields, false);
static const ab__schema_t source_url = AB__SCHEMA("UrlSource", source_url_fields, false);
static const ab__schema_t source_file = AB__SCHEMA("FileSource", source_file_fields, false);

static const ab__name_t source_names[] = {AB__NAME("data"), AB__NAME("url"), AB__NAME("file")};
static const ab__enum_t source_set = {source_names, 3, "data, url, file"};
static const ab__schema_t *const source_variants[] = {&source_data, &source_url, &source_file};
static const ab__union_t part_source = {
    AB__NAME("type"), "source type", &source_set, source_variants, NULL, false,
};

static const ab__field_t part_text_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("text", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("id", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("metadata", AB__K_ANY_NN, OPT, 0, NONE),
};
static const ab__field_t part_media_fields[] = {
    AB__FIELD("type", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("source", AB__K_UNION, REQ, 0, &part_source),
    AB__FIELD("id", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("metadata", AB__K_ANY_NN, OPT, 0, NONE),
};
static const ab__schema_t part_text = AB__SCHEMA("TextPart", part_text_fields, false);
static const ab__schema_t part_media = AB__SCHEMA("MediaPart", part_media_fields, false);

static const ab__name_t part_names[] = {AB__NAME("text"), AB__NAME("image"), AB__NAME("audio"),
                                        AB__NAME("video"), AB__NAME("document")};
static const ab__enum_t part_set = {part_names, 5, "text, image, audio, video, document"};
static const ab__schema_t *const part_variants[] = {&part_text, &part_media, &part_media,
                                                    &part_media, &part_media};
const ab__union_t ab__agui_content_part = {
    AB__NAME("type"), "content part type", &part_set, part_variants, NULL, false,
};

/* ---- Message ------------------------------------------------------------ */

/* Members every message variant has: id, role (discriminator), metadata, subagentRunId. */
#define MESSAGE_BASE                                                                               \
    AB__FIELD("id", AB__K_STR, REQ, 0, NONE), AB__FIELD("role", AB__K_SKIP, REQ, 0, NONE),         \
        AB__FIELD("metadata", AB__K_MAP, OPT, 0, NONE),                                            \
        AB__FIELD("subagentRunId", AB__K_STR, OPT, 0, NONE)

static const ab__field_t msg_instruction_fields[] = {
    MESSAGE_BASE,
    AB__FIELD("content", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("name", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("encryptedValue", AB__K_STR, OPT, 0, NONE),
};
static const ab__field_t msg_assistant_fields[] = {
    MESSAGE_BASE,
    AB__FIELD("content", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("toolCalls", AB__K_LIST, OPT, 0, &tool_call_schema),
    AB__FIELD("name", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("encryptedValue", AB__K_STR, OPT, 0, NONE),
};
static const ab__field_t msg_user_fields[] = {
    MESSAGE_BASE,
    AB__FIELD("content", AB__K_CONTENT, REQ, 0, &ab__agui_content_part),
    AB__FIELD("name", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("encryptedValue", AB__K_STR, OPT, 0, NONE),
};
static const ab__field_t msg_tool_fields[] = {
    MESSAGE_BASE,
    AB__FIELD("content", AB__K_CONTENT, REQ, 0, &ab__agui_content_part),
    AB__FIELD("toolCallId", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("error", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("encryptedValue", AB__K_STR, OPT, 0, NONE),
};
static const ab__field_t msg_activity_fields[] = {
    MESSAGE_BASE,
    AB__FIELD("activityType", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("content", AB__K_MAP, REQ, 0, NONE),
};
static const ab__field_t msg_reasoning_fields[] = {
    MESSAGE_BASE,
    AB__FIELD("content", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("encryptedValue", AB__K_STR, OPT, 0, NONE),
};

static const ab__schema_t msg_instruction =
    AB__SCHEMA("DeveloperMessage/SystemMessage", msg_instruction_fields, false);
static const ab__schema_t msg_assistant =
    AB__SCHEMA("AssistantMessage", msg_assistant_fields, false);
static const ab__schema_t msg_user = AB__SCHEMA("UserMessage", msg_user_fields, false);
static const ab__schema_t msg_tool = AB__SCHEMA("ToolMessage", msg_tool_fields, false);
static const ab__schema_t msg_activity = AB__SCHEMA("ActivityMessage", msg_activity_fields, false);
static const ab__schema_t msg_reasoning =
    AB__SCHEMA("ReasoningMessage", msg_reasoning_fields, false);

static const ab__name_t message_role_names[] = {
    AB__NAME("developer"), AB__NAME("system"),   AB__NAME("assistant"), AB__NAME("user"),
    AB__NAME("tool"),      AB__NAME("activity"), AB__NAME("reasoning")};
static const ab__enum_t message_roles = {
    message_role_names, 7, "developer, system, assistant, user, tool, activity, reasoning"};
static const ab__schema_t *const message_variants[] = {
    &msg_instruction, &msg_instruction, &msg_assistant, &msg_user,
    &msg_tool,        &msg_activity,    &msg_reasoning};
/* closed: an unknown message role is fatal in both modes (reference section 7). */
const ab__union_t ab__agui_message = {
    AB__NAME("role"), "message role", &message_roles, message_variants, NULL, true,
};

/* ---- JSON Patch (RFC 6902) ---------------------------------------------- */

static const ab__field_t op_value_fields[] = {
    AB__FIELD("op", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("path", AB__K_PTR, REQ, 0, NONE),
    AB__FIELD("value", AB__K_ANY, REQ, 0, NONE),
};
static const ab__field_t op_remove_fields[] = {
    AB__FIELD("op", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("path", AB__K_PTR, REQ, 0, NONE),
};
static const ab__field_t op_from_fields[] = {
    AB__FIELD("op", AB__K_SKIP, REQ, 0, NONE),
    AB__FIELD("from", AB__K_PTR, REQ, 0, NONE),
    AB__FIELD("path", AB__K_PTR, REQ, 0, NONE),
};
/* open: members an operation does not define are ignored (RFC 6902 section 4). */
static const ab__schema_t op_value = AB__SCHEMA("add/replace/test", op_value_fields, true);
static const ab__schema_t op_remove = AB__SCHEMA("remove", op_remove_fields, true);
static const ab__schema_t op_from = AB__SCHEMA("move/copy", op_from_fields, true);

static const ab__name_t op_names[] = {AB__NAME("add"),  AB__NAME("remove"), AB__NAME("replace"),
                                      AB__NAME("move"), AB__NAME("copy"),   AB__NAME("test")};
static const ab__enum_t op_set = {op_names, 6, "add, remove, replace, move, copy, test"};
static const ab__schema_t *const op_variants[] = {&op_value, &op_remove, &op_value,
                                                  &op_from,  &op_from,   &op_value};
const ab__union_t ab__agui_patch_op = {
    AB__NAME("op"), "patch op", &op_set, op_variants, NULL, false,
};

/* ---- RunAgentInput ------------------------------------------------------ */

static const ab__field_t run_input_fields[] = {
    AB__FIELD("threadId", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("runId", AB__K_STR, REQ, 0, NONE),
    AB__FIELD("messages", AB__K_UNION_LIST, REQ, 0, &ab__agui_message),
    AB__FIELD("protocolVersion", AB__K_STR, OPT, 0, NONE),
    AB__FIELD("parentRunId", AB__K_STR, OPT, 0, NONE),
    /* the 1.0 schema tolerates a null state (read as absent): AB__K_ANY */
    AB__FIELD("state", AB__K_ANY, OPT, 0, NONE),
    AB__FIELD("tools", AB__K_LIST, OPT, 0, &tool_schema),
    AB__FIELD("context", AB__K_LIST, OPT, 0, &context_schema),
    AB__FIELD("forwardedProps", AB__K_ANY_NN, OPT, 0, NONE),
    AB__FIELD("resume", AB__K_LIST, AB__F_VAL_SLOT, AB__SLOT(resume), &resume_schema),
};
const ab__schema_t ab__agui_run_input = AB__SCHEMA("RunAgentInput", run_input_fields, false);
