"""`aka optimize`: the measure-revise loop (loop.py), its proposers (llm_proposer.py, offline.py),
prompt assembly (prompts.py + prompts/*.j2), dropout, retrieval and the run store."""
