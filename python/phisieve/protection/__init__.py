"""What is never a training label: the direct scope (how far the words of direct spans reach:
in place, the patient's other uses, corpus-wide identifying words) and the spans it reads
(:mod:`phisieve.protection.scope`). The index marks corpus-wide direct terms with it and
``encode`` flags every token with it."""
