"""Tables -> findings: the Spark job, its input checks, the cause rules
(``kdiag.analysis.causes``) and the sentences users read."""
