"""The course itself: the graded exercises (``exercises`` says what each asks and which mistakes it
names; ``grading`` runs a learner's function against it, every notebook) and the textbook loader
that notebook 01 races against the library's (``textbook``).
"""
