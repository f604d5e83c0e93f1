"""The knowledge base: its file format (entries.py), chunking (chunks.py), BM25 (bm25.py), the
Chroma index and hybrid ranking (index.py), what retrievers read and return (retrieval.py: typed
signals, symptoms, hits), the file retriever (file_retriever.py) and the Chroma one (retriever.py),
the labelled evaluation (evalset.py), kernel verification and stats (verify.py), the best kernel per
op (best.py), and `aka kb` (cli.py)."""
