"""Real tools over MCP (stdio): the client and its pools of server processes (`client`), the check a config's
servers pass before a run (`check`), and the launcher that puts each server under resource limits
(`limits`, run as a script). The environment that offers these tools to the model is workbench/envs/mcp_env.py.
"""
