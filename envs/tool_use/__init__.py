"""Tool-use environment families: ToolCalc, SqlQuery, FileOps, OrderDesk."""
