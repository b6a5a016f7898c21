"""A deterministic synthetic clinical corpus in the style of MIMIC-III's NOTEEVENTS.

The notes are built from a fixed library of templated, shared clinical prose (nursing,
physician, radiology, ECG, echo, discharge and other notes), plus what makes patients
identifiable: MIMIC de-identification placeholders with per-patient ids and dates (``[**Known
lastname 4015**]``, ``[**2149-3-4**]`` ...), a few made-up words that only one patient uses
(pet names, home towns, rare drugs), and words shared by a handful of neighbouring patients.

Patient ``i``'s notes are a pure function of ``(seed, i)`` and the length settings, so any
split of the patients into ranges or batches produces the same rows.
"""

from __future__ import annotations

import bisect
import gzip
import io
import re
from collections.abc import Iterator
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import ConfigError, InputError
from ..io.schema import DOCUMENTS

__all__ = ["SYNTH", "synth_batches"]

SYNTH = pa.schema(
    [
        *DOCUMENTS,
        pa.field("category", pa.string(), nullable=False),
        pa.field("chartdate", pa.string(), nullable=False),
    ]
)
"""Schema of :func:`synth_batches`: the ``documents`` columns plus ``category`` and
``chartdate`` (``YYYY-MM-DD``, MIMIC's shifted years 2100-2200)."""

MIMIC_COLUMNS = (
    "ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME",
    "CATEGORY", "DESCRIPTION", "CGID", "ISERROR", "TEXT",
)  # fmt: skip
"""The columns of ``synth --format mimic-csv``, quoted as MIMIC-III ships them (TEXT
double-quoted, with embedded newlines and doubled quotes); ROW_ID, SUBJECT_ID and HADM_ID
equal the parquet ``doc_id``, ``patient_id`` and ``group_id``."""

# --------------------------------------------------------------------------------------------
# Vocabulary: slot name -> choices, most frequent first (slots are filled Zipf-like).
# --------------------------------------------------------------------------------------------
_VOCAB = {k: v.split("|") for k, v in {
    "abx": "vancomycin|zosyn|cefepime|ceftriaxone|levofloxacin|flagyl|meropenem|acyclovir|"
           "fluconazole|azithromycin|bactrim|cipro|linezolid|micafungin|clindamycin|unasyn|"
           "gentamicin|daptomycin|aztreonam|caspofungin",
    "analg": "morphine|dilaudid|fentanyl|tylenol|oxycodone|percocet|toradol|tramadol",
    "sed": "propofol|fentanyl|versed|precedex|ativan",
    "pressor": "levophed|neo|vasopressin|dopamine|epinephrine|dobutamine|milrinone",
    "rhythm": "NSR|ST|SB|AF|afib|a-flutter|SR|V-paced|A-paced|junctional rhythm",
    "ectopy": "no ectopy noted|rare PVCs|occasional PVCs|frequent PACs|short run of NSVT|"
              "occ PACs|frequent PVCs",
    "ls": "clear|coarse|diminished|crackles|rhonchi|exp wheezes|clear to diminished|"
          "fine crackles|scattered rhonchi",
    "lsloc": "bilaterally|at bases|in RLL|in LLL|in upper lobes|throughout|R>L|L>R|on the right",
    "o2": "RA|2L NC|3L NC|4L NC|6L NC|40% face tent|50% cool neb|shovel mask|NRB|high flow 60%|"
          "35% trach mask",
    "mode": "CMV|AC|PSV|SIMV|CPAP|CPAP/PS|A/C",
    "diet": "clear liquids|full liquids|cardiac diet|diabetic diet|regular diet|soft solids|"
            "thin liquids|ground solids|nectar thick liquids|NPO",
    "tf": "Nutren Pulmonary|Replete with fiber|Impact|Promote|Fibersource HN|Novasource Renal|"
          "Nepro",
    "secr": "thick|thin|copious|scant|moderate amt of|small amt of",
    "color": "white|yellow|tan|blood tinged|clear|green|brown",
    "stool": "brown|guaiac neg|guaiac positive|loose|liquid|soft formed|melena|maroon",
    "urine": "clear yellow|amber|cloudy|pink tinged|dark amber|straw colored",
    "skin": "intact|warm and dry|cool and clammy|pale|jaundiced|diaphoretic|mottled",
    "wound": "Sacral decub|Coccyx stage II|R heel ulcer|Sternal incision|Abd incision|"
             "L groin site|R groin site|Trach site|PEG site|Chest tube site",
    "wounddesc": "clean dry and intact|with scant serous drainage|open to air|with dsd in place|"
                 "reddened|with duoderm in place|staples intact|steri strips intact",
    "line": "R IJ TLC|L SC CVL|PICC|A-line|L radial a-line|R femoral TLC|PIV x2|20g PIV|Cordis|"
            "swan",
    "dx": "CHF|COPD|CAD|DM2|HTN|ESRD|CKD|afib|pneumonia|sepsis|UTI|GI bleed|ARDS|NSTEMI|STEMI|"
          "CVA|SDH|SAH|PE|DVT|cirrhosis|pancreatitis|DKA|hyperkalemia|AMS|ETOH withdrawal|"
          "aspiration pneumonia|c diff colitis|urosepsis|respiratory failure|AAA|VT|"
          "s/p CABG|s/p AVR|s/p fall|hip fracture|cholangitis|SBO|anemia|hyponatremia",
    "proc": "CABG x3|AVR|MVR|ex-lap|ERCP|EGD|colonoscopy|bronchoscopy|cardiac cath|"
            "PCI with stent to LAD|thoracentesis|paracentesis|PEG placement|trach|"
            "IR embolization|craniotomy|VATS|TIPS|hemodialysis line placement|LP",
    "lab": "Hct|WBC|plt|Na|K|Cl|HCO3|BUN|Cr|Glu|Mg|Ca|Phos|INR|PTT|lactate|troponin|CK|ALT|"
           "AST|T bili|alk phos|lipase|albumin",
    "rel": "wife|husband|daughter|son|sister|brother|niece|nephew|mother|friend|partner|"
           "granddaughter|grandson",
    "symptom": "CP|SOB|nausea|vomiting|abd pain|HA|dizziness|palpitations|chills|diarrhea|"
               "dysuria|cough|fevers|weakness|syncope",
    "neuroadj": "lethargic|drowsy but arousable|agitated|confused|calm|restless|anxious|"
                "appropriate|sleeping|pleasantly confused",
    "neuroint": "haldol|ativan|seroquel|zyprexa|reorientation|sitter",
    "effect": "good|fair|minimal|some|little",
    "painloc": "incisional|abd|back|chest|hip|leg|shoulder|generalized",
    "insulin": "RISS|insulin gtt|lantus|NPH|humalog SS",
    "freq": "DAILY (Daily)|BID (2 times a day)|TID (3 times a day)|Q6H (every 6 hours)|"
            "QHS (once a day (at bedtime))|Q8H (every 8 hours)|PRN",
    "route": "PO|IV|SC|IM|PR|via NGT|via PEG|SL",
    "homemed": "lisinopril|metoprolol|atorvastatin|simvastatin|aspirin|plavix|coumadin|lasix|"
               "metformin|glipizide|omeprazole|protonix|levothyroxine|amlodipine|hctz|prednisone|"
               "albuterol|advair|spiriva|gabapentin|sertraline|citalopram|seroquel|haldol|senna|"
               "colace|lactulose|rifaximin|nadolol|spironolactone|digoxin|amiodarone|diltiazem|"
               "carvedilol|allopurinol|tamsulosin|finasteride|zolpidem|trazodone|keppra|"
               "dilantin|enoxaparin|pantoprazole|magnesium oxide|calcium carbonate|thiamine|"
               "folic acid|multivitamin",
    "pulseq": "palpable|weakly palpable|dopplerable|+2|+1",
    "skintemp": "warm|cool|warm and well perfused|cool to touch",
    "lineflush": "flushes easily|dressing changed|drawing back well|dsg due tomorrow",
    "edema": "trace|1+|2+|3+|no",
    "edemaloc": "BLE|BUE|feet|hands|sacrum|scrotum",
    "ampm": "AM|PM",
    "coughq": "weak|strong|productive|nonproductive|congested",
    "neb": "Albuterol|Atrovent|Combivent|Xopenex",
    "cxr": "worsening bilateral infiltrates|improving RLL infiltrate|unchanged pulmonary edema|"
           "small L effusion|no acute process|increased vascular congestion",
    "abd": "soft, nontender|distended, firm|obese, soft|soft, mildly distended|tender to palpation",
    "bs": "present x4|hypoactive|active|absent",
    "bm": "No BM this shift|Large soft brown stool|Incontinent of loose stool|Flexiseal in place|"
          "Small formed BM",
    "appetite": "fair|poor|good",
    "cream": "sween cream|criticaid|aloe vesta|allevyn|barrier cream",
    "skinarea": "buttocks|coccyx|groin|heels|perineum",
    "monitor": "hemodynamics|resp status|UO|lytes|neuro status|pain|Hct|mental status|I&O",
    "wean": "vent|FiO2|pressors|levophed|sedation|O2|propofol",
    "genapp": "No acute distress|Well nourished|Overweight / Obese|Anxious|Thin|Diaphoretic",
    "heent": "PERRL|Normocephalic|Sclera anicteric|Conjunctiva pale|Endotracheal tube|NG tube",
    "murmur": "No(t) assessed|Systolic|Diastolic|None",
    "srcinf": "pulmonary|urinary|biliary|line|abdominal|unclear",
    "dvtppx": "SQ UF Heparin|Boots|LMW Heparin",
    "code": "Full code|DNR / DNI|DNR (do not resuscitate)|Comfort care",
    "sexw": "man|woman|male|female",
    "eval": "pneumonia|effusion|PTX|CHF|interval change|ETT placement|line placement|bleed",
    "heartsize": "normal|mildly enlarged|top normal|moderately enlarged",
    "normalish": "normal|unremarkable|stable|within normal limits",
    "effsize": "a small|a moderate|a large|a trace",
    "side": "right|left|bilateral",
    "tiploc": "low SVC|cavoatrial junction|right atrium|mid SVC",
    "pvc": "is mild|has improved|is unchanged|has worsened",
    "ventricles": "normal in size|prominent|unchanged",
    "liver": "normal in echotexture|coarsened and nodular|diffusely echogenic",
    "gb": "is unremarkable|is distended with sludge|contains multiple stones|is surgically absent",
    "opac": "likely represent atelectasis|are concerning for pneumonia|are unchanged",
    "imp": "No acute cardiopulmonary process|Interval improvement in pulmonary edema|"
           "Stable bilateral pleural effusions|Right lower lobe pneumonia|No pneumothorax|"
           "No acute intracranial process|Cholelithiasis without cholecystitis|"
           "Lines and tubes in standard position|Worsening bibasilar atelectasis",
    "change": "decrease|increase|resolution|no change",
    "la": "normal in size|mildly dilated|moderately dilated|elongated",
    "mreg": "trivial|mild (1+)|moderate (2+)|severe (4+)",
    "pasp": "normal|mildly elevated|moderately elevated|severely elevated",
    "echochg": "no change|the LVEF is now lower|the effusion is smaller|MR is now worse",
    "sbt": "passed|failed|deferred",
    "marital": "married|widowed|divorced|single",
    "home": "single family home|apartment|group home|assisted living facility",
    "subst": "ETOH|tobacco|IVDU|cocaine|marijuana",
    "coping": "well|appropriately|with difficulty",
    "unit": "MICU|CCU|SICU|CSRU|TSICU|floor",
    "apdx": "SEPSIS|HYPOTENSION (NOT SHOCK)|ACUTE RENAL FAILURE (ARF)|"
            "RESPIRATORY FAILURE, ACUTE (NOT ARDS)|ATRIAL FIBRILLATION (AFIB)|"
            "ALTERED MENTAL STATUS (NOT DELIRIUM)|PNEUMONIA, BACTERIAL, COMMUNITY ACQUIRED (CAP)|"
            "GASTROINTESTINAL BLEED, UPPER (MELENA, GI BLEED, GIB)|"
            "HEART FAILURE (CHF), SYSTOLIC, ACUTE ON CHRONIC|DIABETES MELLITUS (DM), TYPE II|"
            "ELECTROLYTE & FLUID DISORDER, OTHER|PAIN CONTROL (ACUTE PAIN, CHRONIC PAIN)",
    "allergy": "No Known Allergies to Drugs|Penicillins|Sulfa (Sulfonamide Antibiotics)|Codeine|"
               "Iodine; Iodine Containing|Percocet|Morphine|Lisinopril|Latex",
    "reaction": "Rash;|Hives;|Nausea/Vomiting|Anaphylaxis;|Unknown;|Angioedema;",
    "dispo": "Home|Home With Service|Extended Care|Rehab|Expired",
    "service": "MEDICINE|SURGERY|CARDIOTHORACIC|NEUROSURGERY|ORTHOPAEDICS|CSURG|NEUROLOGY",
    "echoind": "Left ventricular function|Congestive heart failure|Endocarditis|"
               "Pericardial effusion|Murmur|Shortness of breath",
    "quality": "Adequate|Suboptimal|Good",
    "exam": "CHEST (PORTABLE AP)|CHEST (PA & LAT)|CT HEAD W/O CONTRAST|CT ABDOMEN W/CONTRAST|"
            "CT CHEST W/CONTRAST|MR HEAD W & W/O CONTRAST|RENAL U.S.|"
            "LIVER OR GALLBLADDER US (SINGLE ORGAN)|UNILAT LOWER EXT VEINS|"
            "CTA CHEST W&W/O C&RECONS, NON-CORONARY|ABDOMEN (SUPINE & ERECT)",
    "shift": "0700-1900|1900-0700|7a-7p|7p-7a|Days|Nights|0700-1500",
    "hobby": "beekeeping|falconry|taxidermy|accordion|curling|origami|fencing|bagpipes|"
             "woodturning|glassblowing|birdwatching|quilting|calligraphy|bowling|fly fishing|"
             "pottery|harmonica|ballroom dancing|crossword puzzles|stamp collecting|sailing|"
             "archery|knitting|chess|kayaking|pinochle|bridge|mahjong|lacrosse|yodeling",
    "job": "longshoreman|machinist|bus driver|plumber|schoolteacher|librarian|welder|"
           "electrician|accountant|firefighter|fisherman|carpenter|nurse|mail carrier|"
           "pharmacist|cobbler|boilermaker|stonemason|locksmith|clockmaker|milliner|"
           "pipefitter|glazier|upholsterer|saddler|chimney sweep|tanner|cooper|luthier|farrier",
}.items()}  # fmt: skip

# --------------------------------------------------------------------------------------------
# Shared prose: pool name -> line templates. {slot} draws from _VOCAB, {#a:b} an integer,
# {%a:b} a one-decimal number. Templates listed first are used most.
# --------------------------------------------------------------------------------------------
_POOLS = {
    "neuro": """\
Pt {neuroadj}, A&Ox{#1:3}, MAE, follows commands.
Alert and oriented x{#1:3}, pleasant and cooperative, MAE with equal strength.
Sedated on {sed} gtt at {#10:60} mcg/kg/min, RASS {#-3:0}, arouses to voice.
PERRL {#2:4}mm brisk, {neuroadj} at times, reoriented easily.
c/o {painloc} pain {#3:9}/10, medicated with {analg} with {effect} effect.
Denies {symptom} or {symptom}. Speech clear, gag and cough intact.
Pt {neuroadj} overnight, {neuroint} given with {effect} effect.
Gets {neuroadj} at night, frequent reorientation needed, bed alarm on.
Neuro checks q{#1:4}h unchanged, no focal deficits noted.
CIWA scale {#0:18}, received valium {#5:20} mg PO per protocol.
Pain controlled with {analg} PCA, pt using appropriately.
Unable to assess orientation d/t sedation, withdraws to pain in all extremities.
Pt {neuroadj}, nodding appropriately to questions, not following commands consistently.
Pt repeatedly asking "when can I go home?", reassured and reoriented.""",
    "cv": """\
{rhythm} {#60:120}s, {ectopy}. SBP {#90:160}s.
HR {#55:125} BP {#85:170}/{#40:95} MAP {#55:110}.
Pedal pulses {pulseq} by doppler, extremities {skintemp}.
{pressor} gtt titrated to keep MAP > {#60:65}, currently at {%0.1:0.9} mcg/kg/min.
K {%3.1:5.4}, repleted with {#20:60} mEq KCl. Mg {%1.4:2.4}, repleted with {#1:4} gm MgSO4.
Received {#1:3} unit(s) PRBC for Hct {%19.5:27.9}, repeat Hct {%24.0:32.0}.
Lopressor {#5:50} mg {route} given for rate control with {effect} effect.
Hypotensive to {#70:89}/{#30:50} this AM, given {#250:1000} cc NS bolus with improvement.
{line} in place, site c/d/i, {lineflush}.
Edema {edema} to {edemaloc}, skin {skintemp}.
Heparin gtt at {#600:1800} units/hr, PTT {%45.0:95.0}, next PTT due at {#1:12} {ampm}.
Troponin {%0.1:2.5}, CK {#40:900}, MB {#2:40}, cycling enzymes per team.
Tele shows {rhythm} with {ectopy}, no events overnight.
Tmax {%97.5:101.8}, HR {#60:110} {rhythm}, BP stable {#100:150}/{#50:80}.""",
    "resp": """\
LS {ls} {lsloc}. SpO2 {#88:100}% on {o2}.
Vent settings: {mode} {#350:600}x{#10:24}, PEEP {#5:12}, FiO2 {#30:80}%.
ABG {%7.2:7.5}/{#30:65}/{#60:180}, vent changes made per team.
Suctioned for {secr} {color} secretions, sputum sent for culture.
Weaned to {mode} {#5:15}/{#5:10}, tolerating well, RSBI {#30:110}.
Cough {coughq}, encouraged to use IS, achieving {#250:1500} cc.
{neb} nebs given q{#2:6}h with improvement in air movement.
RR {#12:32}, breathing even and unlabored, no SOB noted.
Remains intubated, ETT {#21:25} cm at lip, OGT in place.
CXR this AM shows {cxr}.
Extubated at {#8:11}{ampm} without difficulty, now on {o2}.
Desaturated to {#80:89}% with turning, recovered with increased O2.""",
    "gi": """\
Abd {abd}, BS {bs}. {bm}.
Tolerating {diet}, appetite {appetite}.
TF {tf} at goal {#30:80} cc/hr, residuals < {#10:100} cc.
Foley draining {urine} urine, {#20:150} cc/hr.
Lasix {#20:80} mg IV given with {#500:2000} cc response.
BUN/Cr {#8:90}/{%0.6:4.5}, UO adequate.
NPO after MN for {proc} in AM.
Pt voiding qs via urinal, no c/o dysuria.
Stool {stool}, c diff sent, on contact precautions.
NGT to LCS draining {#50:600} cc {color} fluid.
Given colace and senna, no BM x{#2:5} days.""",
    "skin": """\
{wound} {wounddesc}.
Skin {skin}, turned and repositioned q2h, heels floated.
Waffle mattress in place, skin care done, {cream} applied to {skinarea}.
Braden score {#10:20}, at risk for breakdown.""",
    "id": """\
Tmax {%98.0:102.4}, WBC {%4.1:24.6}, on {abx} and {abx}.
Blood cultures x2 sent for temp {%100.4:102.9}, urine cx sent.
{abx} trough {%8.0:25.0}, dose adjusted per pharmacy.
Afebrile, cultures pending, continues on {abx} day {#2:14}.""",
    "endo": """\
FS BS {#80:300}, covered with {insulin}.
On {insulin} at {%1.0:12.0} units/hr per protocol, BS {#90:220}.
TSH {%0.1:9.8}, cortisol stim test done, started on hydrocortisone {#50:100} mg IV q{#6:8}h.""",
    "social": """\
{rel} in to visit, updated on plan of care, all questions answered.
Full code. {rel} is HCP.
DNR/DNI per discussion with {rel} and team.
Family meeting planned for tomorrow with {rel} and team.
{rel} called for update, pt resting comfortably.
Pt lives alone, SW consult placed for dispo planning.
{rel} states pt "was fine yesterday", concerned about confusion.""",
    "plan": """\
Continue to monitor {monitor}, {monitor} and {monitor}.
Wean {wean} as tolerated, f/u AM labs and CXR.
Plan for {proc} today, consent in chart.
Possible c/o to floor if stable, bed requested.
Cont current plan of care, support pt and family.
Check {lab} at {#16:23}00, replete lytes prn.
Will f/u with team re: {dx} and {dx}.""",
    "action": """\
Pt given {#250:1000} cc NS bolus.
Started on {pressor} gtt.
{analg} given for pain.
Lytes repleted per sliding scale.
Team notified of {dx}, new orders received.
Blood cultures x2 sent.
Turned q2h, skin care done.
Pt OOB to chair with PT.
Emotional support given to pt and family.
{neb} nebs given, pt suctioned for {secr} secretions.""",
    "response": """\
BP improved to {#95:140}/{#50:80}.
Pain improved, now {#0:4}/10.
UO increased to {#40:200} cc/hr.
No change in mental status.
Pt resting comfortably at this time.
HR remains {#60:130}s {rhythm}.
SpO2 improved to {#92:100}% on {o2}.""",
    "nplan": """\
Continue to monitor BP, titrate {pressor} to MAP > 65.
F/u AM labs, replete lytes as needed.
Continue current abx, f/u cultures.
Pain control with {analg} prn.
Continue to monitor {monitor} and {monitor}.""",
    "events": """\
{proc} done.
Pt with episode of {symptom} overnight, {neuroint} given.
Started {abx} for {dx}.
Fever to {%100.4:102.9}, pan-cultured.
BLOOD CULTURED - At {#1:12}:{#10:59} {ampm}
Allergies: {allergy} {reaction}
Last dose of Antibiotics: {abx} - {#1:12}:{#10:59} {ampm}
Infusions: {pressor} - {%0.1:0.9} mcg/Kg/min
{line} - START {#1:12}:{#10:59} {ampm}""",
    "exam": """\
General Appearance: {genapp}
HEENT: {heent}
Cardiovascular: (S1: Normal), (S2: Normal), (Murmur: {murmur})
Respiratory / Chest: (Breath Sounds: {ls} : )
Abdominal: Soft, Non-tender, Bowel sounds present
Extremities: Right: {edema}, Left: {edema}
Skin: {skin}
Neurologic: Attentive, Follows simple commands, Responds to: Verbal stimuli, Movement: Purposeful
Vital signs: Tmax: {%36.5:39.2} C, HR: {#55:130} bpm, BP: {#85:170}/{#40:95} mmHg, RR: {#12:32}""",
    "labs": """\
WBC {%3.0:22.0} Hct {%20.0:42.0} Plt {#40:450} Cr {%0.5:4.0} TropT {%0.1:1.2} Glucose {#70:300}
{#100:400} K/uL
{%7.0:14.5} g/dL
{#18:32} mEq/L
{%3.0:5.5} mEq/L
PT / PTT / INR:{%11.0:25.0}/{%25.0:80.0}/{%1.0:3.5}, ALT / AST:{#10:300}/{#10:300}
Lactic Acid:{%0.8:6.5} mmol/L, Albumin:{%2.0:4.2} g/dL, Ca++:{%7.5:10.2} mg/dL
BLOOD WBC-{%3.0:22.0} RBC-{%2.5:5.0} Hgb-{%7.0:14.5} Hct-{%20.0:42.0} Plt Ct-{#40:450}
BLOOD Glucose-{#70:300} UreaN-{#8:90} Creat-{%0.5:4.0} Na-{#128:148} K-{%3.0:5.5} Cl-{#95:115}""",
    "ap": """\
{apdx}: likely {srcinf} source, continue {abx} and {abx}, f/u cultures.
ACUTE RENAL FAILURE: Cr {%1.2:4.5} from baseline {%0.7:1.2}, likely prerenal, IVF and trend.
{apdx}: monitor on tele, continue {homemed}, rate control with lopressor prn.
{apdx}: {dx} vs {dx}, trend {lab} and {lab}, consult following.
{apdx}: holding {homemed} for now, {abx} day {#2:14}, monitor {monitor}.""",
    "icu": """\
Nutrition: {diet}
Glycemic Control: {insulin}
Lines: {line}
Prophylaxis: DVT: {dvtppx}, Stress ulcer: PPI, VAP: HOB elevation, Mouth care
Code status: {code}
Disposition: ICU""",
    "indication": """\
{#40:89}-year-old {sexw} with {dx}, evaluate for {eval}.
{dx} and {symptom}, r/o {eval}.
Status post {proc}, assess for {eval}.""",
    "comparison": """\
None.
Prior study from the previous day.
Chest radiograph from earlier the same day.
CT of the abdomen from the prior admission.""",
    "technique": """\
Single portable AP upright view of the chest.
Axial images were obtained through the head without intravenous contrast.
MDCT axial images were acquired following the administration of IV contrast.
Coronal and sagittal reformats were obtained.
Grayscale and color Doppler ultrasound images were obtained.""",
    "findings": """\
The heart size is {heartsize}. The mediastinal and hilar contours are {normalish}.
There is {effsize} {side} pleural effusion with adjacent atelectasis.
No pneumothorax is seen.
ET tube terminates {#2:6} cm above the carina.
The {line} terminates in the {tiploc}.
Pulmonary vascular congestion {pvc}.
There is no intracranial hemorrhage, mass effect, or shift of midline structures.
The ventricles and sulci are {ventricles} for age.
The liver is {liver}. No focal lesions.
The gallbladder {gb}.
No free air or free fluid.
Bibasilar opacities {opac}.
Nasogastric tube courses below the diaphragm with tip in the stomach.""",
    "impression": """\
{imp}.
1. {imp}.
2. {imp}.
Interval {change} of {side} pleural effusion.
Findings discussed with the covering resident at the time of the study.""",
    "ecg": """\
Sinus rhythm.
Sinus tachycardia.
Atrial fibrillation with rapid ventricular response.
Left axis deviation.
Left anterior fascicular block.
Right bundle-branch block.
Nonspecific ST-T wave changes.
Q waves in leads II, III and aVF consistent with prior inferior myocardial infarction.
Low QRS voltage in the limb leads.
Prolonged QT interval.
Compared to the previous tracing there is no significant change.
Poor R wave progression, cannot exclude prior anterior wall myocardial infarction.
Intervals Axes Rate PR QRS QT/QTc P QRS T {#60:110} {#120:200} {#80:120} {#340:420}/{#400:480}""",
    "echo": """\
The left atrium is {la}.
Left ventricular wall thickness, cavity size and regional/global systolic function are normal.
Overall left ventricular systolic function is mildly depressed (LVEF {#35:50}%).
There is {mreg} mitral regurgitation.
The aortic valve leaflets ({#2:3}) are mildly thickened.
Right ventricular chamber size and free wall motion are {normalish}.
The estimated pulmonary artery systolic pressure is {pasp}.
There is no pericardial effusion.
Compared with the prior study (images reviewed), {echochg}.""",
    "vent": """\
Pt remains on {mode} {#350:600}x{#10:24}, PEEP {#5:12}, FiO2 {#30:80}%.
BS {ls} {lsloc}, suctioned for {secr} {color} secretions.
MDI's given as ordered: {neb} {#4:8} puffs q{#4:6}h.
RSBI {#30:120} this AM, SBT {sbt}.
Plan: wean as tolerated, continue to follow.
Cuff pressure {#20:30} cm H2O, ETT secured at {#21:25} cm lip.""",
    "nutrition": """\
Pt with {dx}, on {diet}.
Current wt {#45:130} kg, IBW {#45:90} kg, BMI {%17.0:42.0}.
Estimated needs: {#1400:2600} kcal/d, {#60:140} g protein/d.
Recommend {tf} at {#30:80} ml/hr to provide {#1200:2400} kcal and {#60:130} g protein.
Will continue to follow.""",
    "socialwork": """\
SW met with pt and {rel} to provide support.
Pt is {marital}, lives with {rel} in a {home}.
Pt has history of {subst} use, provided resources.
Family coping {coping}, will continue to follow.
Discussed goals of care, pt wishes to be {code}.""",
    "hpi": """\
{#40:89} y/o {sexw} with history of {dx}, {dx} and {dx} who presents with {symptom}.
In the ED, initial vitals were T {%97.0:102.5} HR {#60:130} BP {#80:190}/{#40:100} RR {#12:30}.
Pt was given {abx} and {#1:4}L IVF and admitted to the {unit} for further management.
On ROS, pt denies {symptom}, {symptom}, {symptom}.
Pt reports "{symptom}" for {#1:7} days, worse with exertion.""",
    "pmh": """\
- {dx}
- {dx}, s/p {proc}
- {dx} on {homemed}""",
    "family": """\
Non-contributory.
Mother with {dx}, father died of {dx}.
Brother with {dx}.""",
    "course": """\
# {dx}: treated with {abx} with improvement, cultures negative at discharge.
# {dx}: pt was monitored on telemetry, {homemed} was continued.
Pt was transferred to the {unit} for {dx} and {dx}, then called out to the floor.
Pt underwent {proc} without complication.""",
    "meds": """\
{#1:9}. {homemed} {#5:100} mg Tablet Sig: One (1) Tablet PO {freq}.
{#1:9}. {homemed} {#5:100} mg Capsule Sig: Two (2) Capsule PO {freq}.
{#1:9}. {homemed} {#5:100} mg/mL Solution Sig: {#5:30} ML PO {freq}.""",
    "dispo": """\
{dispo}
{dispo}
{dispo}
Facility:
[**Hospital 4**] Rehab""",
    "dxlist": """\
Primary: {dx}
Secondary: {dx}, {dx}""",
    "condition": """\
Mental Status: Clear and coherent. Level of Consciousness: Alert and interactive.
Activity Status: Ambulatory - Independent.
Hemodynamically stable, afebrile.""",
    "instructions": """\
You were admitted to the hospital with {dx}.
Please take all medications as prescribed.
Call your doctor or return to the ED if you experience {symptom}, {symptom} or fevers.
Please weigh yourself every morning and call your MD if weight goes up more than 3 lbs.""",
}

# Patient lines: str.format fields come from the patient/note dict built in _Patient.
_PATIENT_LINES = {
    "nursing": (
        "Family: {rel} [**Name (NI) {nni}**] in to visit, updated at bedside.",
        "Dr. [**Last Name (STitle) {lst}**] aware of {dx}.",
        "Spoke with {rel} by phone [**Telephone/Fax (1) {tel}**], questions answered.",
        "HCP is {rel} [**Known firstname {kfn}**] [**Known lastname {kln}**].",
        "Pt transferred from [**Hospital {hosp}**] on [**{adm}**].",
        "Pt [**Known lastname {kln}**] seen by Dr. [**First Name (STitle) {fst}**] this AM.",
        "{vitals}",
        "{vitals}",
    ),
    "physician": (
        "{mr} [**Known lastname {kln}**] is a {age} y/o {sexw} with {dx} who presents from "
        "[**Hospital {hosp}**].",
        "Seen and examined with Dr. [**First Name (Titles) {fnt}**] "
        "[**Last Name (Titles) {lnt}**].",
        "Discussed with {rel} and Dr. [**Doctor First Name {dfn}**] [**Doctor Last Name {dln}**] "
        "on [**{md}**].",
        "MRN: [**Medical Record Number {mrn}**]",
        "Transferred from [**Hospital1 {hosp1}**] on [**{adm}**] for {dx}.",
        "{vitals}",
    ),
    "misc": (
        "Pt works for [**Company {company}**], forms faxed, Job#: [**Job Number {jobn}**].",
        "Pacemaker interrogated, device serial [**Serial Number {serial}**].",
        "Pt emigrated from [**Country {country}**] in [**{yr}**].",
        "Retired professor at [**University/College {uni}**].",
        "{rel} lives in [**State {state}**], contact via [**E-mail address {email}**].",
        "Pt given info for support group website [**URL {url}**].",
        "Last colonoscopy [**{my}**], unremarkable per pt.",
        "Pt reports symptoms began in [**Month (only) {month}**], worse since [**{md}**].",
        "Quit smoking in [**Year (4 digits) {year4}**].",
        "Mail correspondence to [**PO Box {pobox}**].",
        "SSN on file [**Social Security Number {ssn}**], verified with admitting.",
        "Unit No: [**Numeric Identifier {numid}**]",
        "Pt's {rel} [** **] called.",
        "PCP is Dr. [**First Name8 (NamePattern2) {fn8}**] [**Last Name (NamePattern1) {lnp}**] "
        "at [**Hospital1 {hosp1}**].",
        "Lives with {rel} [**Known firstname {kfn}**] at [**Street Address(2) {street}**] in "
        "[**Location (un) {loc}**].",
        "Pt is {age} years old, born [**{dob}**].",
    ),
    "radiology": (
        "DR. [**First Name (STitle) {fst}**] [**Last Name (STitle) {lst}**]",
        "Approved: DR. [**First Name (STitle) {fst}**] [**Doctor Last Name {dln}**] "
        "[**{d}**] {time}",
        "Compared with study of [**{prev}**].",
        "Findings were called to Dr. [**Last Name (STitle) {lst}**] at {time} on [**{d}**].",
    ),
    "ecg": (
        "Since the previous tracing of [**{prev}**] no significant change.",
        "Read by: [**Last Name (LF) {lnlf}**],[**First Name3 (LF) {fnlf}**]",
    ),
    "discharge": (
        "Name:  [**Known lastname {kln}**],[**Known firstname {kfn}**]     "
        "Unit No:   [**Numeric Identifier {numid}**]",
        "Pt was seen at [**Hospital1 {hosp1}**] in [**{my}**] for {dx}.",
        "Outpatient echo [**{prev}**] showed preserved EF.",
        "Discharged to [**Hospital {hosp}**] rehab in [**Location (un) {loc}**].",
    ),
}

# Lines carrying words that only one patient (or a few neighbours) uses: {w} is the word.
_RARE_LINES = {
    "pet": (
        "Pt asking about her dog {w}, {rel} caring for him at home.",
        "Pt's cat {w} being cared for by neighbor.",
        "Pt talking about his dog {w}, seems to calm him.",
    ),
    "town": (
        "Pt originally from {w}, moved here many years ago.",
        "{rel} drove in from {w} to visit.",
        "Pt states he grew up in {w}.",
    ),
    "kin": (
        "{rel} {w} called, updated on plan of care.",
        "Pt's godson {w} at bedside this afternoon.",
        "Friend {w} brought in home meds.",
    ),
    "drug": (
        "Home meds also include {w} 10 mg daily, prescribed abroad.",
        "Pt reports taking {w} for joint pain, pharmacy unable to verify.",
        "Allergic to {w} per outside records.",
    ),
}
_SHARED_LINES = (
    "Pt attends the {w} senior center.",
    "{rel} lives in {w}.",
    "Pt is a retired worker at the {w} mill.",
)
_TAIL_LINES = ("Hobbies include {hobby}.", "Pt is a retired {job}.", "Pt enjoys {hobby}.")


class _Cat(NamedTuple):
    name: str
    weight: float
    descriptions: tuple[str, ...]
    skew: float  # note length = lo + (hi - lo) * span * u**skew
    span: float
    headers: tuple[str, ...]
    sections: tuple[tuple[str, str, float, int], ...]  # (header, pool, weight, max lines or 0)
    within: str  # joins a section's lines
    between: str  # joins sections
    contexts: tuple[str, ...]  # _PATIENT_LINES keys
    times: bool  # has CHARTTIME/STORETIME/CGID
    prose: bool  # may carry the rare-word lines


_NURSE_SECTIONS = (
    ("Neuro: ", "neuro", 2, 2), ("CV: ", "cv", 2.5, 0), ("Resp: ", "resp", 2, 2),
    ("GI/GU: ", "gi", 2, 2), ("Skin: ", "skin", 0.7, 1), ("ID: ", "id", 0.8, 2),
    ("Endo: ", "endo", 0.5, 1), ("Social: ", "social", 0.8, 2), ("Plan: ", "plan", 1.2, 2),
)  # fmt: skip
_RAD_HEADER = (
    "[**{d}**] {time}     {exam}                          "
    "Clip # [**Clip Number (Radiology) {clip}**]\n"
    "Reason: {eval}\nAdmitting Diagnosis: {admdx}\n"
    "______________________________________________________________________________\n"
    "[**Hospital 2**] MEDICAL CONDITION:\n  {age} year old {sexw} with {dx}\n"
    "______________________________________________________________________________\n"
    "                                 FINAL REPORT"
)
_DS_HEADER = (
    "Admission Date:  [**{adm}**]              Discharge Date:   [**{dis}**]\n\n"
    "Date of Birth:  [**{dob}**]             Sex:   {sex}\n\n"
    "Service: {service}\n\nAllergies:\n{allergy}\n\n"
    "Attending:[**First Name3 (LF) {fnlf}**]\n\nChief Complaint:\n{symptom}"
)
_DS_FOOTER = (
    "Followup Instructions:\nProvider: [**First Name8 (NamePattern2) {fn8}**] "
    "[**Last Name (NamePattern1) {lnp}**], MD Phone:[**Telephone/Fax (1) {tel}**]\n"
    "Date/Time:[**{fu}**] 10:30\n\nCompleted by:[**{dis}**]"
)
_ECHO_HEADER = (
    "PATIENT/TEST INFORMATION:\nIndication: {echoind}\nHeight: (in) {ht}\nWeight (lb): {wt}\n"
    "BP (mm Hg): {sbp}/{dbp}\nHR (bpm): {hr}\nStatus: Inpatient\nDate/Time: [**{d}**] at {time}\n"
    "Test: TTE (Complete)\nTechnical Quality: {quality}\n\nINTERPRETATION:\n\nFindings:"
)
_CATEGORIES = (
    _Cat("Nursing/other", 0.28, ("Report",), 1.2, 1.0,
         ("NPN {shift}", "Nursing Progress Note {shift}", "{unit} NPN {shift}"),
         _NURSE_SECTIONS, " ", "\n", ("nursing", "misc"), True, True),
    _Cat("Radiology", 0.2, ("{exam}",), 1.5, 0.7, (_RAD_HEADER,),
         (("INDICATION: ", "indication", 1, 1), ("COMPARISON: ", "comparison", 0.5, 1),
          ("TECHNIQUE: ", "technique", 0.8, 1), ("FINDINGS: ", "findings", 4, 0),
          ("IMPRESSION: ", "impression", 1.5, 2)),
         " ", "\n\n", ("radiology",), True, False),
    _Cat("Nursing", 0.14, ("Nursing Progress Note", "Nursing Transfer Note", "Generic Note"),
         1.2, 1.0, ("{apdx}",),
         (("Assessment:\n", "neuro", 1, 2), ("", "cv", 1.5, 0), ("", "resp", 1, 2),
          ("Action:\n", "action", 1, 3), ("Response:\n", "response", 1, 2),
          ("Plan:\n", "nplan", 1, 2)),
         " ", "\n", ("nursing", "misc"), True, True),
    _Cat("Physician", 0.12,
         ("Physician Resident Progress Note", "Intensivist Note",
          "Physician Attending Admission Note"),
         0.9, 1.0, ("Chief Complaint: {dx}\n24 Hour Events:",),
         (("", "events", 1.5, 3), ("Physical Examination\n", "exam", 2, 4),
          ("Labs / Radiology\n", "labs", 2, 4), ("Assessment and Plan\n", "ap", 3, 0),
          ("ICU Care\n", "icu", 1, 3)),
         "\n", "\n", ("physician", "misc"), True, True),
    _Cat("ECG", 0.08, ("Report",), 1.5, 0.1, ("",), (("", "ecg", 1, 0),), "\n", "\n",
         ("ecg",), False, False),
    _Cat("Discharge summary", 0.06, ("Report", "Report", "Addendum"), 0.4, 1.0, (_DS_HEADER,),
         (("History of Present Illness:\n", "hpi", 2, 3), ("Past Medical History:\n", "pmh", 1, 3),
          ("Social History:\n", "socialwork", 0.6, 2), ("Family History:\n", "family", 0.3, 1),
          ("Physical Exam:\n", "exam", 1.2, 4), ("Pertinent Results:\n", "labs", 1.5, 5),
          ("Brief Hospital Course:\n", "course", 3, 0),
          ("Medications on Admission:\n", "meds", 1, 6),
          ("Discharge Medications:\n", "meds", 1, 6),
          ("Discharge Disposition:\n", "dispo", 0.2, 1),
          ("Discharge Diagnosis:\n", "dxlist", 0.4, 1),
          ("Discharge Condition:\n", "condition", 0.4, 2),
          ("Discharge Instructions:\n", "instructions", 0.8, 2)),
         "\n", "\n\n", ("discharge", "physician", "misc"), False, True),
    _Cat("Echo", 0.04, ("Report",), 1.5, 0.6, (_ECHO_HEADER,), (("", "echo", 1, 0),), "\n", "\n",
         ("radiology",), False, False),
    _Cat("Respiratory", 0.04, ("Respiratory Care Shift Note",), 1.5, 0.5,
         ("Respiratory Care {shift}",), (("", "vent", 2, 0), ("", "resp", 1, 2)), " ", "\n",
         ("nursing",), True, True),
    _Cat("Nutrition", 0.02, ("Nutrition Note",), 1.5, 0.4, ("Nutrition Assessment",),
         (("", "nutrition", 1, 0),), " ", "\n", ("nursing", "misc"), True, True),
    _Cat("Social Work", 0.02, ("Social Work Progress Note",), 1.5, 0.5, ("Social Work Note",),
         (("", "socialwork", 1, 0), ("", "social", 0.5, 2)), " ", "\n", ("misc", "nursing"),
         True, True),
)  # fmt: skip

_POOL_SIZE = 600
# Pools whose entries are list items (joined by newlines) and pools whose entries are one line.
_LIST_POOLS = frozenset({"events", "exam", "labs", "icu", "pmh", "meds", "dispo", "dxlist", "ecg"})
_ONE_LINE_POOLS = frozenset({"indication", "comparison", "family", "dispo", "dxlist"})
_SLOT = re.compile(r"\{(#|%)?([^{}]+)\}")
_CONS, _VOW = "bdfgklmnprstvz", "aeiou"
_SYL = [c + v for c in _CONS for v in _VOW]  # 70 two-letter syllables
_END = ("rik", "dor", "vin", "mar", "sel", "ton", "gan", "lek")  # ends the unique words only
_SUFFIX = {
    "pet": ("o", "a", "y", "ie", "us"),
    "town": ("ville", "burg", "field", "haven", "stead"),
    "kin": ("a", "o", "ette", "ias", "ine"),
    "drug": ("mab", "tinib", "zolam", "pril", "cillin"),
}
_SHARED_END = ("ford", "wick", "dale", "mont", "port", "ham")
_SHARED_BLOCK = 8  # neighbouring patients i // 8 share a few words
_BASE_ORD = date(2100, 1, 1).toordinal()


class _Section(NamedTuple):
    header: str
    header_tokens: int
    lines: list[str]
    tokens: list[int]
    size: int
    cap: int  # most lines drawn for this section (0: no limit)
    by_count: dict[int, int]  # token count -> index of a line that long


class _Built(NamedTuple):
    cat: _Cat
    sections: tuple[_Section, ...]
    cum: tuple[float, ...]  # cumulative section weights, last == 1
    main: int  # the section that absorbs what the others leave


class _Library(NamedTuple):
    cats: tuple[_Built, ...]
    cat_cum: list[float]


@lru_cache(maxsize=1)
def _library() -> _Library:
    """Realise every pool once (fixed seed, so the shared prose is the same for all seeds)."""
    draws = np.random.default_rng(0x5EED).random(1 << 19).tolist()
    pos = 0

    def nxt() -> float:
        nonlocal pos
        pos += 1
        return draws[pos % len(draws)]

    def fill(m: re.Match[str]) -> str:
        kind, body = m.group(1), m.group(2)
        if kind == "#":
            lo, hi = (int(x) for x in body.split(":"))
            return str(lo + int((hi - lo + 1) * nxt()))
        if kind == "%":
            lo, hi = (float(x) for x in body.split(":"))
            return f"{lo + (hi - lo) * nxt():.1f}"
        words = _VOCAB[body]
        return words[int(len(words) * nxt() ** 2)]

    pools: dict[str, tuple[list[str], list[int], dict[int, int]]] = {}
    for name, text in _POOLS.items():
        templates = text.split("\n")
        joiner = "\n" if name in _LIST_POOLS else " "
        lines = []
        for _ in range(_POOL_SIZE):  # an entry is 1-3 lines, so a note takes fewer entries
            m = 1 if name in _ONE_LINE_POOLS else 1 + int(3 * nxt() ** 1.5)
            picks = {int(len(templates) * nxt()) for _ in range(m)}
            lines.append(joiner.join(_SLOT.sub(fill, templates[t]) for t in sorted(picks)))
        counts = [len(s.split()) for s in lines]
        by_count: dict[int, int] = {}
        for idx, c in enumerate(counts):
            by_count.setdefault(c, idx)
        pools[name] = (lines, counts, by_count)
    cats = []
    for cat in _CATEGORIES:
        secs = tuple(
            _Section(h, len(h.split()), pools[p][0], pools[p][1], _POOL_SIZE, cap, pools[p][2])
            for h, p, _, cap in cat.sections
        )
        weights = [w for _, _, w, _ in cat.sections]
        cum = (np.cumsum(weights) / sum(weights)).tolist()
        cum[-1] = 1.0
        main = weights.index(max(weights))
        assert secs[main].cap == 0, cat.name
        cats.append(_Built(cat, secs, tuple(cum), main))
    cat_cum = np.cumsum([c.weight for c in _CATEGORIES]).tolist()
    cat_cum = [c / cat_cum[-1] for c in cat_cum]
    return _Library(tuple(cats), cat_cum)


@lru_cache(maxsize=8)
def _syllable_perms(seed: int) -> list[list[str]]:
    u = np.random.default_rng([seed, 0x5E1F]).random((8, len(_SYL)))
    return [[_SYL[k] for k in np.argsort(row, kind="stable").tolist()] for row in u]


def _unique_word(seed: int, i: int) -> str:
    """A made-up name that is different for every patient of a seed (a bijective encoding)."""
    perms = _syllable_perms(seed)
    out, n, pos = [], i, 0
    while n or pos < 3:
        n, d = divmod(n, len(_SYL))
        out.append(perms[pos % 8][d])
        pos += 1
    return "".join(out).capitalize() + _END[(i + seed) % len(_END)]


def _made_up(u: list[float], suffixes: tuple[str, ...], nsyl: int) -> str:
    word = "".join(_SYL[int(len(_SYL) * x)] for x in u[:nsyl])
    return word + suffixes[int(len(suffixes) * u[nsyl])]


@lru_cache(maxsize=4)
def _shared_words(seed: int, block: int) -> tuple[str, ...]:
    u = np.random.default_rng([seed, block, 0xB10C]).random(16).tolist()
    return tuple(_made_up(u[k * 4 :], _SHARED_END, 2).capitalize() for k in range(3))


def _pick(words: list[str], u: float) -> str:
    return words[int(len(words) * u * u)]


def _ds(o: int) -> str:
    d = date.fromordinal(o)
    return f"{d.year}-{d.month}-{d.day}"


def _take(
    sec: _Section, v: list[float], k: int, quota: int, total: int, parts: list[str]
) -> tuple[int, int]:
    """Append pool lines of ``sec`` to ``parts`` until ``quota`` tokens (or ``sec.cap`` lines)
    are reached, never going past ``total`` tokens: the line that would cross it is swapped for
    one of exactly the remaining length, or cut. Returns (tokens added, next draw index)."""
    used, nv, lines, counts, size = 0, len(v), sec.lines, sec.tokens, sec.size
    left = sec.cap or -1
    while used < quota and left:
        x = v[k % nv]
        idx = int(size * x * x)
        k += 1
        c = counts[idx]
        if used + c > total:
            rest = total - used
            fit = sec.by_count.get(rest)
            parts.append(lines[fit] if fit is not None else " ".join(lines[idx].split()[:rest]))
            return total, k
        parts.append(lines[idx])
        used += c
        left -= 1
    return used, k


class _Fields(dict):
    """A patient's str.format fields; the note-level ones are computed when a line uses them,
    from ``note`` = (day ordinal, the note's uniforms, admission start, admission end)."""

    note: tuple[int, list[float], int, int] = (0, [], 0, 0)
    hr0 = sbp0 = 0

    def __missing__(self, key: str) -> Any:
        day, u, adm0, adm1 = self.note
        if key == "d":
            return _ds(day)
        if key == "adm":
            return _ds(adm0)
        if key == "dis":
            return _ds(adm1)
        if key == "prev":
            return _ds(day - 1 - int(400 * u[22]))
        if key == "md":
            return _ds(day - int(5 * u[6]))[5:]
        if key == "fu":
            return _ds(adm1 + 7 + int(21 * u[7]))
        if key in ("my", "yr"):
            d = date.fromordinal(day - 1 - int(900 * u[9]))
            return f"{d.month}/{d.year}" if key == "my" else d.year
        if key == "time":
            hh, mm = int(23 * u[5]), int(60 * u[6])
            return f"{hh % 12 or 12}:{mm:02d} {'AP'[hh >= 12]}M"
        if key == "exam":
            return _pick(_VOCAB["exam"], u[23])
        if key == "clip":
            return int(100000 * u[21])
        if key == "shift":
            return _pick(_VOCAB["shift"], u[8])
        if key == "hr":
            return self.hr0 + int(30 * u[10])
        if key == "sbp":
            return self.sbp0 + int(30 * u[11])
        if key == "dbp":
            return 50 + int(30 * u[12])
        if key == "vitals":
            return (
                f"T {97 + 4 * u[20] * u[20]:.1f} HR {self['hr']} BP {self['sbp']}/{self['dbp']} "
                f"RR {12 + int(14 * u[13])} SpO2 {100 - int(9 * u[14] * u[14])}% on "
                f"{_pick(_VOCAB['o2'], u[15])}"
            )
        raise KeyError(key)


def _patient_notes(seed: int, i: int, npp: tuple[int, int], wpn: tuple[int, int]) -> list[tuple]:
    """All notes of patient ``i``: (row_id, hadm_id, chartdate, charttime, storetime, category,
    description, cgid, text, tokens), in chronological order. A pure function of its args."""
    lib = _library()
    rng = np.random.default_rng([seed, i])
    f = rng.random(128).tolist()  # patient-level draws; f[48:80] make the placeholder ids
    n = npp[0] + min(int((npp[1] - npp[0] + 1) * f[0]), npp[1] - npp[0])
    g = rng.random(24 * n).tolist()
    U = [g[24 * j : 24 * j + 24] for j in range(n)]  # note-level draws
    ids = [1 + int(9999 * x) for x in f[48:80]]
    rare_u = f[80:120]
    lo, hi = wpn
    cats = [lib.cats[bisect.bisect_left(lib.cat_cum, u[0])] for u in U]
    targets = [
        lo + min(int((hi - lo + 1) * b.cat.span * u[2] ** b.cat.skew), hi - lo)
        for u, b in zip(U, cats, strict=True)
    ]
    v = rng.random(sum(targets) // 8 + 64).tolist()  # pool-entry draws, used cyclically

    # Demographics, admissions and dates (MIMIC's shifted years).
    age = 18 + int(80 * f[1])
    female = f[2] < 0.5
    n_adm = 1 + int(3 * f[3])
    start = _BASE_ORD + int(365 * 88 * f[4])
    adms = []
    for a in range(n_adm):
        length = 1 + int(20 * f[5 + a])
        adms.append((start, start + length))
        start += length + 30 + int(570 * f[8 + a])
    order = sorted(range(n), key=lambda j: (int(n_adm * U[j][3]), U[j][4], j))
    p = _Fields({
        "kln": ids[0], "kfn": ids[1], "fnt": ids[2], "lnt": ids[3], "lnp": ids[4],
        "fn8": ids[5], "dfn": ids[6], "dln": ids[7], "hosp": ids[8], "loc": ids[9],
        "street": ids[10], "tel": ids[11], "mrn": ids[12], "numid": ids[13], "email": ids[14],
        "state": ids[15] % 60, "company": ids[16], "country": ids[17] % 200, "uni": ids[18],
        "url": ids[19], "jobn": ids[20], "serial": ids[21], "ssn": ids[22], "pobox": ids[23],
        "nni": ids[24], "lst": ids[25], "fst": ids[26], "lnlf": ids[27], "fnlf": ids[28],
        "month": ids[29] % 120, "year4": ids[30] % 40, "hosp1": (18, 18, 18, 69, 2177)[ids[31] % 5],
        "age": "[**Age over 90 **]" if age > 89 else age, "sex": "F" if female else "M",
        "sexw": "woman" if female else "man", "mr": "Ms." if female else "Mr.",
        "rel": _pick(_VOCAB["rel"], f[11]), "dx": _pick(_VOCAB["dx"], f[12]),
        "admdx": _pick(_VOCAB["dx"], f[13]).upper(), "apdx": _pick(_VOCAB["apdx"], f[14]),
        "unit": _pick(_VOCAB["unit"], f[15]), "service": _pick(_VOCAB["service"], f[16]),
        "allergy": _pick(_VOCAB["allergy"], f[17]), "symptom": _pick(_VOCAB["symptom"], f[18]),
        "echoind": _pick(_VOCAB["echoind"], f[19]), "quality": _pick(_VOCAB["quality"], f[20]),
        "ht": 58 + int(18 * f[21]), "wt": 100 + int(180 * f[22]),
        "eval": _pick(_VOCAB["eval"], f[23]),
        "dob": _ds(adms[0][0] - int(365.25 * age) - int(365 * f[24])),
    })  # fmt: skip
    p.hr0, p.sbp0 = 60 + int(40 * f[25]), 100 + int(50 * f[26])
    rel = p["rel"].capitalize()

    # Rare words, placed in prose notes (nursing, physician, discharge ...): one name unique to
    # the patient in the first such note, 0-4 more made-up words, maybe some words shared with
    # neighbouring patients, maybe a rare real hobby or job.
    prose = [o for o, j in enumerate(order) if cats[j].cat.prose] or list(range(n))
    must: list[list[str]] = [[] for _ in range(n)]
    optional: list[list[str]] = [[] for _ in range(n)]
    roles = ("pet", "town", "kin", "drug")
    lines = _RARE_LINES[roles[int(3 * f[27])]]
    must[prose[0]].append(lines[int(3 * f[28])].format(w=_unique_word(seed, i), rel=rel))
    for r in range(int(5 * f[29])):
        ru = rare_u[r * 8 : r * 8 + 8]
        role = roles[int(4 * ru[0])]
        word = _made_up(ru[1:], _SUFFIX[role], 3 + int(2 * ru[6]))
        word = word if role == "drug" else word.capitalize()
        line = _RARE_LINES[role][int(3 * ru[7])].format(w=word, rel=rel)
        must[prose[int(len(prose) * ru[5])]].append(line)
        if ru[4] < 0.4:  # some rare words recur in another note
            optional[prose[int(len(prose) * ru[4] / 0.4)]].append(line)
    for k, word in enumerate(_shared_words(seed, i // _SHARED_BLOCK)):
        if f[30 + k] < 0.4:
            optional[prose[int(len(prose) * f[33 + k])]].append(
                _SHARED_LINES[k].format(w=word, rel=rel)
            )
    if f[36] < 0.5:
        line = _TAIL_LINES[int(3 * f[38])]
        optional[prose[int(len(prose) * f[37])]].append(
            line.format(hobby=_pick(_VOCAB["hobby"], f[39]), job=_pick(_VOCAB["job"], f[39]))
        )

    notes = []
    cgid0 = 14000 + int(7000 * f[40])
    hadm0 = 100_000_000 + 4 * i
    k = 0
    for out_j, j in enumerate(order):
        u, b = U[j], cats[j]
        cat = b.cat
        a = int(n_adm * u[3])
        adm0, adm1 = adms[a]
        day = adm0 + int((adm1 - adm0 + 1) * u[4])
        p.note = (day, u, adm0, adm1)

        # Token budget: must lines first, then the header, optional lines, then pool prose.
        budget = targets[j]
        extra = must[out_j]
        for s in extra:
            budget -= len(s.split())
        header = cat.headers[int(len(cat.headers) * u[7])].format_map(p)
        ht = len(header.split())
        if ht > budget:
            header, ht = "", 0
        budget -= ht
        footer = ""
        if cat.name == "Discharge summary":
            footer = _DS_FOOTER.format_map(p)
            ft = len(footer.split())
            if ft * 3 > budget:
                footer, ft = "", 0
            budget -= ft
        ctx = cat.contexts
        cand = optional[out_j]
        for x in u[16 : 16 + int(4 * u[9])]:
            lines = _PATIENT_LINES[ctx[int(len(ctx) * x * x)]]
            cand.append(lines[int(len(lines) * (x * 7.31 % 1.0))].format_map(p))
        for s in dict.fromkeys(cand):
            t = len(s.split())
            if t * 3 <= budget and s not in extra:
                extra.append(s)
                budget -= t

        # Pool prose, spread over the sections by weight: exactly `budget` tokens.
        secs, used, out = b.sections, 0, {}
        last = len(secs) - 1
        for s, sec in enumerate(secs):
            quota = budget if s == last else int(budget * b.cum[s])
            if quota - used <= sec.header_tokens:
                continue
            parts: list[str] = []
            used += sec.header_tokens
            t, k = _take(sec, v, k, quota - used, budget - used, parts)
            used += t
            out[s] = (sec.header, parts)
        if used < budget or not out:  # top up the main section
            sec = secs[b.main]
            if b.main not in out:
                fits = budget - used > sec.header_tokens
                out[b.main] = (sec.header if fits else "", [])
                used += sec.header_tokens if fits else 0
            t, k = _take(sec, v, k, budget - used, budget - used, out[b.main][1])
        keys = sorted(out)
        for m, s in enumerate(extra):
            x = u[18 + m % 4]
            parts = out[keys[int(len(keys) * x)]][1]
            parts.insert(int((len(parts) + 1) * (x * 7.77 % 1.0)), s)
        body = cat.between.join([out[s][0] + cat.within.join(out[s][1]) for s in keys])
        text = f"{header}\n{body}" if header else body
        if footer:
            text = f"{text}\n{footer}"
        d = date.fromordinal(day)
        iso = d.isoformat()
        if cat.times:
            hh, mm = int(23 * u[5]), int(60 * u[6])
            ct = f"{iso} {hh:02d}:{mm:02d}:00"
            st = "" if cat.name == "Radiology" else f"{iso} {hh:02d}:{min(mm + 5, 59):02d}:00"
            cgid = cgid0 + int(50 * u[19])
        else:
            ct = st = cgid = ""
        desc = cat.descriptions[int(len(cat.descriptions) * u[1])]
        notes.append((
            i * 1000 + out_j + 1, hadm0 + a, iso, ct, st, cat.name,
            desc.format_map(p) if "{" in desc else desc, cgid, text, targets[j] - min(budget, 0),
        ))  # fmt: skip
    return notes


def check_sizes(
    patients: int, seed: int, npp: tuple[int, int], wpn: tuple[int, int], first: int = 0
) -> None:
    for name, x in (("patients", patients), ("seed", seed), ("first_patient", first)):
        if not isinstance(x, (int, np.integer)) or isinstance(x, bool) or x < 0:
            raise InputError(f"{name} must be a non-negative integer")
    if not (len(npp) == 2 and 1 <= npp[0] <= npp[1] <= 999):
        raise InputError("notes_per_patient must be (lo, hi) with 1 <= lo <= hi <= 999")
    if not (len(wpn) == 2 and 1 <= wpn[0] <= wpn[1]):
        raise InputError("words_per_note must be (lo, hi) with 1 <= lo <= hi")


def patient_rows(
    patients: int, seed: int, npp: tuple[int, int], wpn: tuple[int, int], first: int
) -> Iterator[tuple[int, list[tuple]]]:
    npp, wpn = (int(npp[0]), int(npp[1])), (int(wpn[0]), int(wpn[1]))
    seed, first = int(seed), int(first)
    for i in range(first, first + int(patients)):
        yield i, _patient_notes(seed, i, npp, wpn)


def synth_batches(
    patients: int,
    seed: int = 0,
    *,
    notes_per_patient: tuple[int, int] = (2, 8),
    words_per_note: tuple[int, int] = (60, 400),
    first_patient: int = 0,
    batch_rows: int = 8192,
) -> Iterator[pa.RecordBatch]:
    """Generate a synthetic MIMIC-III-style corpus as a stream of record batches.

    Parameters
    ----------
    patients
        How many patients to generate, numbered ``first_patient`` .. ``first_patient +
        patients - 1``; patient ``i`` has ``patient_id`` ``str(10_000_000 + i)``.
    seed
        Seed of the corpus. Patient ``i``'s notes depend only on ``(seed, i)`` and the two
        length settings, so splitting the patients into ranges or batches changes nothing.
    notes_per_patient
        Inclusive range of the number of notes per patient (at most 999).
    words_per_note
        Inclusive range of a note's whitespace-token count (exact: the last line of a note may
        be cut). A note exceeds the upper bound only if it is below ~55, to fit the lines that
        carry the patient's rare words.
    first_patient
        Index of the first patient generated.
    batch_rows
        Rows per batch (the last batch may be smaller). A patient's notes may straddle
        two batches, but they are always contiguous and patients come in increasing order.

    Yields
    ------
    pyarrow.RecordBatch
        Batches of schema :data:`SYNTH`: ``doc_id`` (MIMIC's ROW_ID, ``i * 1000 + j + 1``
        for the patient's ``j``-th note in date order), ``patient_id``, ``group_id`` (the
        admission, MIMIC's HADM_ID; 1-3 per patient), ``text``, ``category`` and ``chartdate``.

    Raises
    ------
    InputError
        If an argument is out of range.
    """
    check_sizes(patients, seed, notes_per_patient, words_per_note, first_patient)
    if not isinstance(batch_rows, (int, np.integer)) or batch_rows < 1:
        raise InputError("batch_rows must be a positive integer")
    rows = patient_rows(patients, seed, notes_per_patient, words_per_note, first_patient)
    return to_batches(rows, batch_rows)


def to_batches(
    rows: Iterator[tuple[int, list[tuple]]], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    cols: list[list] = [[] for _ in range(6)]
    for i, notes in rows:
        pid = str(10_000_000 + i)
        for nt in notes:
            cols[0].append(str(nt[0]))
            cols[1].append(pid)
            cols[2].append(str(nt[1]))
            cols[3].append(nt[8])
            cols[4].append(nt[5])
            cols[5].append(nt[2])
        while len(cols[0]) >= batch_rows:
            yield _batch([c[:batch_rows] for c in cols])
            cols = [c[batch_rows:] for c in cols]
    if cols[0]:
        yield _batch(cols)


def _batch(cols: list[list]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(cols, SYNTH, strict=True)], schema=SYNTH
    )


def _csv_quote(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def write_mimic_csv(
    target: Path, rows: Iterator[tuple[int, list[tuple]]], tick: Any, name: str
) -> dict[str, int]:
    """Write the CSV to ``target``, gzipped when the output's ``name`` ends in ``.gz`` (the
    gzip header names it, with no time: the file is a pure function of the rows)."""
    gz = name.endswith(".gz")
    n_rows = n_tokens = n_patients = 0
    with open(target, "wb") as raw:
        stream: Any = (
            gzip.GzipFile(name.removesuffix(".gz"), "wb", fileobj=raw, mtime=0) if gz else raw
        )
        with io.TextIOWrapper(stream, encoding="utf-8", newline="") as fh:
            fh.write(",".join(f'"{c}"' for c in MIMIC_COLUMNS) + "\n")
            for i, notes in rows:
                buf = []
                for rid, hadm, day, ct, st, cat, desc, cgid, text, tok in notes:
                    buf.append(
                        f"{rid},{10_000_000 + i},{hadm},{day},{ct},{st},{_csv_quote(cat)},"
                        f"{_csv_quote(desc)},{cgid},,{_csv_quote(text)}\n"
                    )
                    n_tokens += tok
                fh.write("".join(buf))
                n_rows += len(notes)
                n_patients += 1
                tick(1)
    return {"rows": n_rows, "patients": n_patients, "tokens": n_tokens}


def parse_range(text: str, option: str) -> tuple[int, int]:
    """``LO:HI`` as a pair of integers (``option`` names the option in the message)."""
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError(f"{option} must be LO:HI, e.g. 2:8, not {text!r}") from None
    return lo, hi
