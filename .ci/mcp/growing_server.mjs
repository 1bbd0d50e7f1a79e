// A small MCP server (stdio, official TypeScript SDK) whose tool list grows on request, for
// the test that loomflow follows `notifications/tools/list_changed`:
// `add_tool {name}` adds a tool `name` that answers "<name> says hello", then announces the
// change; `add_quietly {name}` adds one and announces nothing. The list says it may be kept
// for a minute (`ttlMs`), which a client's `refresh` must not take as a reason not to ask.
// For the test that a call the client gives up on is cancelled with the server:
// `wait_for_cancel` answers only once the client cancels it (`notifications/cancelled`),
// and `cancelled_calls` says how many calls were cancelled so.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const tools = [
  {
    name: "add_tool",
    description: "Adds a tool with the given name and announces the new list",
    inputSchema: {
      type: "object",
      properties: { name: { type: "string" } },
      required: ["name"],
    },
  },
  {
    name: "add_quietly",
    description: "Adds a tool with the given name and says nothing",
    inputSchema: {
      type: "object",
      properties: { name: { type: "string" } },
      required: ["name"],
    },
  },
  {
    name: "wait_for_cancel",
    description: "Answers only once the client cancels the call",
    inputSchema: { type: "object", properties: {} },
  },
  {
    name: "cancelled_calls",
    description: "How many calls the client cancelled",
    inputSchema: { type: "object", properties: {} },
  },
];

let cancelled = 0;

const server = new Server(
  { name: "growing", version: "1.0.0" },
  { capabilities: { tools: { listChanged: true } } },
);

server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools, ttlMs: 60000 }));

server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const { name, arguments: args } = request.params;
  if (name === "wait_for_cancel") {
    await new Promise((resolve) => extra.signal.addEventListener("abort", resolve));
    cancelled += 1;
    return { content: [{ type: "text", text: "cancelled" }] };
  }
  if (name === "cancelled_calls") {
    return { content: [{ type: "text", text: String(cancelled) }] };
  }
  if (name === "add_tool" || name === "add_quietly") {
    tools.push({
      name: args.name,
      description: `Added at run time`,
      inputSchema: { type: "object", properties: {} },
    });
    if (name === "add_tool") {
      await server.sendToolListChanged();
    }
    return { content: [{ type: "text", text: `added ${args.name}` }] };
  }
  if (tools.some((tool) => tool.name === name)) {
    return { content: [{ type: "text", text: `${name} says hello` }] };
  }
  return { content: [{ type: "text", text: `no tool ${name}` }], isError: true };
});

await server.connect(new StdioServerTransport());
