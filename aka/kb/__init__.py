"""The knowledge-base index: chunking (chunks.py), BM25 (bm25.py), the Chroma index and hybrid
ranking (index.py), the agent's retriever (retriever.py), the labelled evaluation (evalset.py),
kernel verification and stats (verify.py), and `aka kb` (cli.py)."""
