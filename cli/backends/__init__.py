"""The wire layer: one client per server protocol, side by side, and the wire-neutral types
(`messages`) the loop sees. A client turns its protocol into ChatChunk, ToolCall, Stats and
ModelInfo, so the loop, the policy and the UIs never see a wire format."""
