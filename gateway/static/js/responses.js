// The Responses API (/v1/responses) as the page uses it: the chat request the page
// builds, sent as a response chained on the last reply's response id
// (previous_response_id: the server replays the conversation from Redis, so only
// what came after that reply is sent), and its typed events folded back into the
// chat.completion.chunk shape a Reply reads.

import { ApiError, apiUrl, errorFrom, headers } from "./api.js";
import { sseEvents } from "./sse.js";

/** The conversation's messages as Responses input items. */
function inputItems(messages) {
  const items = [];
  for (const { role, content, tool_calls: calls, tool_call_id: callId } of messages) {
    if (role === "tool") items.push({ type: "function_call_output", call_id: callId, output: content ?? "" });
    else if (role !== "system") {
      if (content || !calls?.length) items.push({ type: "message", role, content: content ?? "" });
      for (const c of calls || []) {
        items.push({ type: "function_call", call_id: c.id, name: c.function.name, arguments: c.function.arguments });
      }
    }
  }
  return items;
}

/** A /v1/responses body for a chat `body` over `messages` (the conversation, with the page's meta). */
export function responsesBody(body, messages) {
  const out = { stream: true, store: true };
  for (const key of ["model", "temperature", "top_p", "seed"]) if (body[key] !== undefined) out[key] = body[key];
  if (body.max_tokens !== undefined) out.max_output_tokens = body.max_tokens;
  const system = body.messages.find((m) => m.role === "system");
  if (system) out.instructions = system.content;
  const last = messages.findLastIndex((m) => m.meta?.responseId);
  if (last >= 0) out.previous_response_id = messages[last].meta.responseId;
  out.input = inputItems(messages.slice(last + 1).map(({ meta, ...m }) => m));
  const format = body.response_format;
  if (format?.type === "json_schema") out.text = { format: { type: "json_schema", ...format.json_schema } };
  else if (format) out.text = { format };
  if (body.tools) {
    out.tools = body.tools.map((t) => ({ type: "function", ...t.function }));
    const choice = body.tool_choice;
    out.tool_choice = choice?.type === "function" ? { type: "function", name: choice.function.name } : choice;
    out.parallel_tool_calls = body.parallel_tool_calls;
  }
  return out;
}

const FINISH = { completed: "stop", incomplete: "length" };

/** Streams /v1/responses: yields chat.completion.chunk-shaped objects; the last carries the
 * finish reason, usage and `responseId` (what the next turn chains on). */
export async function* streamResponses(conn, body, messages, signal, sessionId = "") {
  const h = headers(conn.apiKey, true);
  if (sessionId) h["X-Session-Id"] = sessionId;
  const response = await fetch(apiUrl(conn, "/v1/responses"), {
    method: "POST",
    headers: h,
    body: JSON.stringify(responsesBody(body, messages)),
    signal,
  });
  if (!response.ok) throw await errorFrom(response);
  let calls = 0;
  for await (const event of sseEvents(response.body)) {
    const data = JSON.parse(event.data);
    const chunk = (delta, extra = {}) => ({ model: data.response?.model, choices: [{ index: 0, delta, ...extra }] });
    if (data.type === "response.output_text.delta") yield chunk({ content: data.delta });
    else if (data.type === "response.reasoning_text.delta") yield chunk({ reasoning: data.delta });
    else if (data.type === "response.output_item.done" && data.item.type === "function_call") {
      const { call_id: id, name, arguments: args } = data.item;
      yield chunk({ tool_calls: [{ index: calls++, id, type: "function", function: { name, arguments: args } }] });
    } else if (data.type === "error" || data.type === "response.failed") {
      throw new ApiError(500, data.message || data.response?.error?.message || "the response failed");
    } else if (data.type === "response.completed" || data.type === "response.incomplete") {
      const { usage, status, id } = data.response;
      const finish = status === "completed" && calls ? "tool_calls" : FINISH[status];
      const counts = { prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens,
                       total_tokens: usage.total_tokens }; // prettier-ignore
      yield { ...chunk({}, { finish_reason: finish }), usage: counts, responseId: id };
    }
  }
}
