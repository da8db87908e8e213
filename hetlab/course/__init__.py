"""The course itself: the graded exercises (``exercises`` says what each asks and which mistakes it
names; ``grading`` runs a learner's function against it, every notebook) and the learner's
"Predict first" guesses, kept beside what was measured (``guesses``, notebooks 02–05).
"""
