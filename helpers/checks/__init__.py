"""The checks the notebooks' builds and exercises call, one module per notebook (``nb04.py``...).

A learner may open them: a check says what it compares and why, never the answer. Each check is
proven by ``tests/test_catalogue_nbNN.py`` against correct answers written differently from the
reference and plausible wrong ones (``tests/catalogue.py``). This package sits at the top of the
house: it may import any helper; no helper imports it.
"""
